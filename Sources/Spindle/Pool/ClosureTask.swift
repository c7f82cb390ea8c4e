import CSpindle

/// The engine's intrusive task node and a Swift closure in one allocation.
///
/// Layout: `[spindle_task | () -> Void]`. The engine links the node while it is queued
/// and calls `run` exactly once; `run` moves the closure out, frees the block and
/// calls the closure (or just releases it when the pool cancelled the task). One node
/// from the engine's cache (``makeTaskBlock(_:run:)``) per submitted closure and no
/// reference counting of a wrapper object.
enum ClosureTask {
    typealias Work = @Sendable () -> Void

    /// The closure in a struct: memory typed as a bare function type is generic storage,
    /// and a closure stored there is re-abstracted — wrapped in a thunk, one allocation
    /// per submit (two mallocs per task instead of one).
    struct Stored {
        let work: Work
    }

    /// The block's size, which the engine's node cache must fit (TaskNodeCacheTests).
    static let byteCount = taskBlockSize(Stored.self)

    static func make(_ work: consuming @escaping Work) -> UnsafeMutablePointer<spindle_task> {
        unsafe makeTaskBlock(Stored(work: work)) { task, reason in
            let work = unsafe takeTaskPayload(task!, Stored.self).work
            if reason == SPINDLE_RUN { work() }
        }
    }
}

/// Disposes of a node the engine refused (it was never queued) the way the engine
/// disposes of one a cancelling shutdown discards: its own `run`, told
/// `SPINDLE_CANCELLED`, releases what the node holds and frees it. So each node type
/// (`ClosureTask`, `JobTask`) says once what "not run" means.
func releaseRefusedTask(_ task: UnsafeMutablePointer<spindle_task>) {
    unsafe task.pointee.run(task, SPINDLE_CANCELLED)
}
