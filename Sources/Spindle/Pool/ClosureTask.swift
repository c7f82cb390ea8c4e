import CSpindle

/// The engine's intrusive task node and a Swift closure in one allocation.
///
/// Layout: `[spindle_task | () -> Void]`. The engine links the node while it is queued
/// and calls `run` exactly once; `run` moves the closure out, frees the block and
/// calls the closure (or just releases it when the pool cancelled the task). One node
/// from the engine's cache (``spindleMalloc(_:)``) per submitted closure and no
/// reference counting of a wrapper object.
enum ClosureTask {
    typealias Work = @Sendable () -> Void

    /// The closure in a struct: memory typed as a bare function type is generic storage,
    /// and a closure stored there is re-abstracted — wrapped in a thunk, one allocation
    /// per submit (two mallocs per task instead of one).
    struct Stored {
        let work: Work
    }

    static let closureOffset = taskPayloadOffset(Stored.self)
    static let byteCount = closureOffset + MemoryLayout<Stored>.size

    static func make(_ work: consuming @escaping Work) -> UnsafeMutablePointer<spindle_task> {
        let raw = spindleMalloc(byteCount)
        let task = raw.initializeMemory(
            as: spindle_task.self,
            repeating: spindle_task(spindle_private: (nil, nil), run: { task, reason in
                let work = takeTaskPayload(task!, Stored.self, at: ClosureTask.closureOffset).work
                if reason == SPINDLE_RUN { work() }
            }),
            count: 1)
        (raw + closureOffset).initializeMemory(as: Stored.self, repeating: Stored(work: work), count: 1)
        return task
    }
}

/// Disposes of a node the engine refused (it was never queued) the way the engine
/// disposes of one a cancelling shutdown discards: its own `run`, told
/// `SPINDLE_CANCELLED`, releases what the node holds and frees it. So each node type
/// (`ClosureTask`, `JobTask`) says once what "not run" means.
func releaseRefusedTask(_ task: UnsafeMutablePointer<spindle_task>) {
    task.pointee.run(task, SPINDLE_CANCELLED)
}

/// Where a payload of type `P` starts in a block that begins with the engine's task
/// node (`ClosureTask`, `JobTask`): just past the node, aligned for `P`.
func taskPayloadOffset<P>(_: P.Type) -> Int {
    let align = MemoryLayout<P>.alignment
    return (MemoryLayout<spindle_task>.stride + align - 1) / align * align
}

/// Moves the payload of type `P` out of a block laid out as `[spindle_task | P]`, with
/// the payload at `offset` (``taskPayloadOffset(_:)``), and frees the block.
@inline(__always)
func takeTaskPayload<P>(_ task: UnsafeMutablePointer<spindle_task>, _: P.Type, at offset: Int) -> P {
    let raw = UnsafeMutableRawPointer(task)
    let payload = (raw + offset).assumingMemoryBound(to: P.self).move()
    spindle_task_free(raw)
    return payload
}

/// Memory for a task node, from the engine's node cache (`spindle_task_alloc`), trapping
/// when it fails.
///
/// A node is allocated by the submitting thread and freed by the worker that runs it,
/// the pattern malloc serves worst: the submitter's per-thread cache never gets a block
/// back. The engine's cache returns each node to the heap of the thread that allocated
/// it, in batches, so a steady stream of submissions costs no malloc at all. Every node
/// type here fits the cached size (`TaskNodeCacheTests` checks it).
@inline(__always)
func spindleMalloc(_ byteCount: Int) -> UnsafeMutableRawPointer {
    guard let p = spindle_task_alloc(byteCount) else {
        fatalError("Spindle: out of memory allocating a task node (\(byteCount) bytes)")
    }
    return p
}
