import CSpindle

// The techniques below depend on how Swift lays out objects and passes closures, not
// on anything the language promises. They are kept here, behind small functions, each
// with the contract its callers rely on and a test that fails if a toolchain changes
// what it relies on (Tests/SpindleTests/Runtime/UnsafeABITests.swift).

/// The engine task node inside an object whose class declares it as its first stored
/// property (`engineTask`: an operation's, an offloaded closure's), found by the
/// object's layout.
///
/// Rejected: a node allocated per submission. Freed where the task ran, it is a
/// cross-thread free per operation; freed with the operation, it is still a second
/// malloc/free pair per operation, and in a producer-bound queue every pair that
/// glibc's thread cache cannot balance goes to its slow path.
enum TaskNode {
    // safety: `object`'s class declares `engineTask` as its first stored property and has
    // no stored superclass; a Swift class instance's stored properties start right after
    // its header (isa pointer and reference counts, two words), for every subclass: a
    // subclass's properties follow its superclass's. `_getUnsafePointerToStoredProperties`
    // returns that address.
    /// Where the node is: the first stored property, just past the object header.
    @inline(__always)
    static func node(of object: AnyObject) -> UnsafeMutablePointer<spindle_task> {
        unsafe _getUnsafePointerToStoredProperties(object).assumingMemoryBound(to: spindle_task.self)
    }

    /// The object header's size: the node's offset from the object's address.
    static let headerSize = unsafe 2 * MemoryLayout<UnsafeRawPointer>.size

    // safety: `task` must be the `engineTask` of a live instance of `T` (node(of:)'s
    // contract); the result is unretained, and the caller says what keeps it alive.
    /// The object whose node `task` is.
    @inline(__always)
    static func object<T: AnyObject>(of task: UnsafeMutablePointer<spindle_task>, as type: T.Type) -> Unmanaged<T> {
        unsafe Unmanaged<T>.fromOpaque(UnsafeRawPointer(task) - headerSize)
    }
}

/// A block laid out as `[spindle_task | P]`, from the engine's node cache: the node,
/// whose `run` the engine calls exactly once, then `payload` just past it, aligned for
/// `P`. With `TaskNode`, the one place that knows how a node and what it carries are
/// laid out (`ClosureTask`, `JobTask`).
@inline(__always)
func makeTaskBlock<P>(_ payload: consuming P, run: spindle_task_fn) -> UnsafeMutablePointer<spindle_task> {
    let raw = unsafe spindleMalloc(taskBlockSize(P.self))
    // safety: `raw` is a fresh block large enough for the node and a `P` at its offset;
    // both are initialised before the block is returned.
    let task = unsafe raw.initializeMemory(
        as: spindle_task.self, repeating: spindle_task(spindle_private: (nil, nil), run: run), count: 1)
    unsafe (raw + taskPayloadOffset(P.self)).initializeMemory(as: P.self, repeating: payload, count: 1)
    return unsafe task
}

/// Moves the payload out of a block made by ``makeTaskBlock(_:run:)`` with a `P`, and
/// frees the block.
@inline(__always)
func takeTaskPayload<P>(_ task: UnsafeMutablePointer<spindle_task>, _: P.Type) -> P {
    // safety: the block holds an initialised `P` at its offset (makeTaskBlock), and this is
    // the node's one run: the engine calls `run` once, and nothing reads the block after.
    let raw = UnsafeMutableRawPointer(task)
    let payload = unsafe (raw + taskPayloadOffset(P.self)).assumingMemoryBound(to: P.self).move()
    unsafe spindle_task_free(raw)
    return payload
}

/// The size of a block `[spindle_task | P]`.
func taskBlockSize<P>(_: P.Type) -> Int { taskPayloadOffset(P.self) + MemoryLayout<P>.size }

/// Where a `P` starts after the node: the node's stride, rounded up to `P`'s alignment.
/// A constant per `P`, folded by the optimiser.
@inline(__always)
func taskPayloadOffset<P>(_: P.Type) -> Int {
    let align = MemoryLayout<P>.alignment
    return (MemoryLayout<spindle_task>.stride + align - 1) / align * align
}

/// Memory for a task node, from the engine's node cache (`spindle_task_alloc`), trapping
/// when it fails.
///
/// A node is allocated by the submitting thread and freed by the worker that runs it,
/// the pattern malloc serves worst: the submitter's per-thread cache never gets a block
/// back. The engine's cache returns each node to the heap of the thread that allocated
/// it, in batches, so a steady stream of submissions costs no malloc at all. Every node
/// type (`ClosureTask`, `JobTask`) fits the cached size (`TaskNodeCacheTests` checks it).
@inline(__always)
func spindleMalloc(_ byteCount: Int) -> UnsafeMutableRawPointer {
    guard let p = unsafe spindle_task_alloc(byteCount) else {
        fatalError("Spindle: out of memory allocating a task node (\(byteCount) bytes)")
    }
    return unsafe p
}

extension Unmanaged {
    /// Calls `body` with the object, without retaining it.
    ///
    /// safety: the caller guarantees the object stays alive for the whole call by some
    /// other reference or protocol (the queue holding itself, the list's reference, a
    /// lock its deinit takes). Used where a retain would be wrong, not only slow: on an
    /// object that may be in its deinit on another thread (a dependent reached through a
    /// list that its deinit empties under a lock), a retain and release would run that
    /// deinit twice. `body` must not capture the object in an escaping closure.
    @inline(__always)
    func withGuaranteedReference<Result>(_ body: (Instance) throws -> Result) rethrows -> Result {
        unsafe try _withUnsafeGuaranteedRef(body)
    }
}

/// `spindle_swift_fork` and `spindle_swift_join` (Sources/CSpindle/join.c), written in
/// C with Swift's calling convention: each receives the offered closure as its two
/// words; a thief calls it as Swift would, and the join returns true when nobody took
/// it, for the caller to call it. The declarations' parameter and result types are
/// their contract; see the C side for why this is not Swift.
///
/// safety: the caller passes the same non-escaping closure to both, and `frame` stays
/// in place between them (both calls are made inside one function that receives the
/// closure as its argument). A closure lives until its last use, the join, so its
/// context outlives every thief's call of it; the join traps if handed other words
/// than the fork was. The C functions must be compiled with `swiftcall` and
/// `swift_context`, which clang provides on the platforms Swift runs on; the portable
/// join (`joinPortable`) is the fallback for a compiler without them
/// (`-D SPINDLE_PORTABLE_JOIN`).
@usableFromInline
@_silgen_name("spindle_swift_fork")
internal func _spindleSwiftFork(
    _ pool: OpaquePointer, _ frame: UnsafeMutablePointer<spindle_join_frame>, _ offered: () -> Void)

/// See `_spindleSwiftFork`.
@usableFromInline
@_silgen_name("spindle_swift_join")
internal func _spindleSwiftJoin(
    _ pool: OpaquePointer, _ frame: UnsafeMutablePointer<spindle_join_frame>, _ offered: () -> Void) -> Bool
