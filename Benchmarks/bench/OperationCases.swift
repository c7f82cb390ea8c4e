import BenchSupport
import Dispatch
import Foundation
import Spindle
import Synchronization

// Foundation's and Spindle's operation types side by side: this file imports both
// modules, so every use is qualified.

/// N `addOperation { }` then `waitUntilAllOperationsAreFinished()`, from one thread.
/// `width`: nil for the default, 1 for the serial variant, which has no `pool-submit`
/// (see ``poolSubmitRun(_:name:)``).
func operationThroughputCase(name: String, tasks: Int, reps: Int, width: Int?) throws -> CaseResult {
    let dispatchName = width == 1 ? "dispatch-serial" : "dispatch"
    var systems = [
        SystemRun(name: "spindle") {
            try addAndWait(tasks, name: name, who: "spindle", queue: Spindle.OperationQueue(), width: width,
                           setWidth: { $0.maxConcurrentOperationCount = $1 },
                           add: { $0.addOperation($1) }, wait: { $0.waitUntilAllOperationsAreFinished() })
        },
        SystemRun(name: "spindle-metrics") {
            try withMetricsPublished(nil) {
                try addAndWait(tasks, name: name, who: "spindle", queue: Spindle.OperationQueue(), width: width,
                               setWidth: { $0.maxConcurrentOperationCount = $1 },
                               add: { $0.addOperation($1) }, wait: { $0.waitUntilAllOperationsAreFinished() })
            }
        },
        SystemRun(name: "foundation") {
            try addAndWait(tasks, name: name, who: "foundation", queue: Foundation.OperationQueue(), width: width,
                           setWidth: { $0.maxConcurrentOperationCount = $1 },
                           add: { $0.addOperation($1) }, wait: { $0.waitUntilAllOperationsAreFinished() })
        },
        SystemRun(name: dispatchName) {
            if width == 1 { return try dispatchSerialRun(tasks, name: name) }
            return try dispatchGroupRun(.global(), tasks: tasks, name: name)
        },
    ]
    var alsoVs = [("spindle", "foundation"), ("spindle-metrics", "spindle")]
    if width == nil {
        systems.append(SystemRun(name: "pool-submit") { try poolSubmitRun(tasks, name: name) })
        systems.append(SystemRun(name: "pool-submit-object") { try poolSubmitRun(tasks, name: name, object: .freedByWorker) })
        systems.append(SystemRun(name: "pool-submit-object-local") {
            try poolSubmitRun(tasks, name: name, object: .freedWhereMade)
        })
        alsoVs += [("spindle", "pool-submit"), ("spindle", "pool-submit-object"), ("spindle", "pool-submit-object-local"),
                   ("pool-submit-object-local", "pool-submit"), ("pool-submit", "foundation")]
    }
    var r = try measure(name, tasks: tasks, reps: reps, reference: dispatchName, alsoVs: alsoVs, systems)
    if width == nil {
        r.note = "pool-submit: each block handed to Spindle's pool with ThreadPool.submit, plus the one shared count a queue keeps; no operation semantics; "
            + "pool-submit-object: the same, and each block holds an object of "
            + (poolSubmitObjectBytes == nil ? "a BlockOperation's allocation size (\(OperationSized.bytes) bytes), "
                                            : "\(OperationSized.bytes) bytes (--object-bytes), ")
            + "which the adding thread makes and the worker frees: what an object per operation costs, with no operation semantics; "
            + "pool-submit-object-local: the same object, marked done by the worker and freed by the adding thread 64 or more "
            + "behind, as the queue frees its operations: the least that an object per operation costs on this hand-off"
    }
    return r
}

/// N closures with `async` on a serial DispatchQueue, then `sync {}`, which returns once
/// every closure before it has run: the cheapest wait for all of them that Dispatch
/// offers a serial queue (a group would add its own count to every closure).
private func dispatchSerialRun(_ tasks: Int, name: String) throws -> Double {
    let queue = DispatchQueue(label: "bench.serial")
    let c = Countdown(tasks)
    let work: @Sendable () -> Void = { c.hit() }
    let t = timed {
        for _ in 0..<tasks { queue.async(execute: work) }
        queue.sync {}
    }.ns
    guard c.remaining.load(ordering: .acquiring) == 0 else { throw BenchFailure("\(name): dispatch lost work") }
    return t
}

/// `pool-submit`'s counters. Globals, so that its blocks capture no object (below).
private let poolSubmitUnfinished = Atomic<Int>(0)
private let poolSubmitRemaining = Atomic<Int>(0)
private let poolSubmitDone = DispatchSemaphore(value: 0)

/// `--object-bytes`: the size of `pool-submit-object`'s object, when given.
nonisolated(unsafe) var poolSubmitObjectBytes: Int?

/// `pool-submit-object`'s object: one allocation of the size the runtime allocates for
/// a `BlockOperation` (its malloc size class), so that the system pays an operation's
/// allocation and free and nothing else of it — or of `--object-bytes`.
final class OperationSized: ManagedBuffer<Int, UInt8> {
    /// The bytes malloc gives a BlockOperation here, read from live ones: the least of
    /// several, since a chunk that malloc split off a larger free one can carry a
    /// remainder too small to split again, and then reads larger than its size class.
    static let bytes: Int = {
        if let given = poolSubmitObjectBytes { return given }
        let probes = (0..<32).map { _ in Spindle.BlockOperation {} }
        return probes.map { bench_allocation_size(Unmanaged.passUnretained($0).toOpaque()) }.min()!
    }()
    /// The elements that make this class's allocation that size (its own header and
    /// the `Int` one come first).
    static let capacity = max(1, bytes - 2 * MemoryLayout<Int>.size - MemoryLayout<Int>.size)

    /// Marks the object done, for the `ObjectsFreedWhereMade` that keeps it: its accesses
    /// before the mark happen before the maker frees it. (The block's own reference,
    /// released after, keeps the object until then if the maker's goes first.)
    func markDone() {
        withUnsafeMutablePointerToElements { bench_flag_set($0) }
    }

    static func make(_ index: Int) -> OperationSized {
        // The cast cannot fail: `create` on a subclass makes an instance of it.
        unsafeDowncast(OperationSized.create(minimumCapacity: capacity) { _ in index }, to: OperationSized.self)
    }
}

@inline(never)
private func poolSubmitObjectBlock(_ object: OperationSized) {
    poolSubmitBlock(object.header)
}

/// `pool-submit-object-local`'s block: marks its object done, then does what
/// `pool-submit`'s does.
@inline(never)
private func poolSubmitLocalObjectBlock(_ object: OperationSized) {
    object.markDone()
    poolSubmitBlock(object.header)
}

@inline(never)
private func poolSubmitBlock(_ index: Int) {
    precondition(index >= 0)
    // The queue's finish: one atomic on the count the adding thread increments.
    poolSubmitUnfinished.subtract(1, ordering: .acquiringAndReleasing)
    if poolSubmitRemaining.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 { poolSubmitDone.signal() }
}

/// `pool-submit`: the engine's hand-off with none of an operation queue's semantics —
/// what the queue would cost if it were nothing but `ThreadPool.submit`, measured in
/// the same run. Each block goes to the pool the queue's operations run on (the shared
/// pool: default quality of service) with `submit`, and the adding thread increments
/// the one shared count that any queue which can tell when it has drained keeps
/// (sequentially consistent, as `OperationQueue.counts`), which the block decrements.
/// No `Operation` object, list, lock, priority, readiness or cancellation. It allocates
/// what an added operation does: the block's context and one object (here the pool's
/// task node; there the operation, which holds the node).
///
/// Its blocks capture an `Int`, not the benchmark's counter object: the pool frees a
/// submitted closure on the worker that ran it, so a captured object's reference count
/// would be released there and retained by the adding thread, bouncing its cache line
/// between the cores on every task (in a standalone loop: ~195 ns per task, against ~150
/// with an `Int`). The queue releases its operations, and their blocks, on the adding
/// thread instead (`OperationQueue.State.prune`), so a capturing block would measure
/// that difference rather than the hand-off.
///
/// `object`: what each block captures instead of its `Int`. A closure that captures one
/// object and nothing else uses that object as its context, so the object takes the
/// place of the block's context: one allocation per block either way, and what differs
/// is its size and the thread that frees it.
/// - `.freedByWorker`: an `OperationSized` made by the adding thread, which the block
///   holds; the worker frees it with the block, as it frees `pool-submit`'s contexts.
/// - `.freedWhereMade`: an `OperationSized` that the adding thread also keeps, in order,
///   and the block marks done (a release store into it). The adding thread frees the
///   oldest ones once they are marked and 64 or more behind, at most two per block added,
///   and the rest after the wait, as `OperationQueue.State.prune` frees finished
///   operations: the malloc and free stay on one thread, and what the worker wrote comes
///   back to it. The least an object per operation costs on this hand-off, with no
///   operation semantics.
private enum PerBlockObject { case none, freedByWorker, freedWhereMade }

private func poolSubmitRun(_ tasks: Int, name: String, object mode: PerBlockObject = .none) throws -> Double {
    let pool = ThreadPool.shared
    poolSubmitUnfinished.store(0, ordering: .relaxed)
    poolSubmitRemaining.store(tasks, ordering: .relaxed)
    _ = OperationSized.capacity
    var kept = ObjectsFreedWhereMade(capacity: mode == .freedWhereMade ? tasks : 0)
    let t = try timed {
        switch mode {
        case .freedByWorker:
            for i in 0..<tasks {
                poolSubmitUnfinished.add(1, ordering: .sequentiallyConsistent)
                // Not Sendable (ManagedBuffer never is); its header is written once, at
                // creation, and only read by the block.
                nonisolated(unsafe) let object = OperationSized.make(i)
                try pool.submit { poolSubmitObjectBlock(object) }
            }
        case .freedWhereMade:
            for i in 0..<tasks {
                poolSubmitUnfinished.add(1, ordering: .sequentiallyConsistent)
                // Not Sendable (ManagedBuffer never is); the block only marks it and reads
                // its header, and the adding thread reads the mark before freeing it.
                nonisolated(unsafe) let object = kept.make(i)
                try pool.submit { poolSubmitLocalObjectBlock(object) }
                kept.freeMarked()
            }
        case .none:
            for i in 0..<tasks {
                poolSubmitUnfinished.add(1, ordering: .sequentiallyConsistent)
                try pool.submit { poolSubmitBlock(i) }
            }
        }
        poolSubmitDone.wait()
        kept.freeAll()
    }.ns
    // The count's last decrement precedes the signal, so it is already zero.
    guard poolSubmitRemaining.load(ordering: .acquiring) == 0, poolSubmitUnfinished.load(ordering: .acquiring) == 0 else {
        throw BenchFailure("\(name): pool-submit lost tasks")
    }
    return t
}

/// `pool-submit-object-local`'s objects, and the contended floor's: each made by one
/// thread, kept in order, marked done by the block that uses it (a release store into
/// it), and freed by the same thread once marked and 64 or more behind, at most two per
/// object made, as `OperationQueue.State.prune` frees finished operations. Used by one
/// thread; a struct, so that the loop that uses it keeps its counts in registers.
struct ObjectsFreedWhereMade: ~Copyable {
    // Each retained once: plain memory, so that keeping them costs a store and no
    // array's checks.
    private let kept: UnsafeMutablePointer<Unmanaged<OperationSized>>
    private let capacity: Int
    private var made = 0
    private var oldest = 0

    init(capacity: Int) {
        self.capacity = capacity
        kept = .allocate(capacity: capacity)
    }

    /// Makes the next object and returns it, for a block that captures it and nothing
    /// else (the closure's context is then the object itself, no allocation of its own)
    /// and marks it done with ``OperationSized/markDone()``.
    mutating func make(_ index: Int) -> OperationSized {
        precondition(made < capacity)
        let object = OperationSized.make(index)
        // The elements are uninitialised memory, possibly a freed object's set flag.
        object.withUnsafeMutablePointerToElements { $0.initialize(to: 0) }
        (kept + made).initialize(to: Unmanaged.passRetained(object))
        made += 1
        return object
    }

    /// Frees up to two of the oldest objects, if marked and 64 or more behind the newest.
    mutating func freeMarked() {
        var freed = 0
        while freed < 2, made - 1 - oldest >= 64,
              kept[oldest]._withUnsafeGuaranteedRef({ $0.withUnsafeMutablePointerToElements { bench_flag_is_set($0) } }) {
            kept[oldest].release()
            oldest += 1
            freed += 1
        }
    }

    /// Frees every object still kept; their blocks must have run.
    mutating func freeAll() {
        while oldest < made { kept[oldest].release(); oldest += 1 }
    }

    /// Hands what is still kept to an object that frees it when released: for a thread
    /// that stops adding before its blocks have run.
    consuming func handOff() -> KeptObjects {
        let rest = KeptObjects(kept, from: oldest, to: made)
        discard self
        return rest
    }

    deinit {
        for i in oldest..<made { kept[i].release() }
        kept.deallocate()
    }
}

/// Objects an `ObjectsFreedWhereMade` still kept when it was handed off: freed with this
/// object, which its owner releases once every block has run.
final class KeptObjects: @unchecked Sendable {
    // @unchecked: made by one thread, then only released, after the blocks that mark the
    // objects have run.
    private let kept: UnsafeMutablePointer<Unmanaged<OperationSized>>
    private let range: Range<Int>

    fileprivate init(_ kept: UnsafeMutablePointer<Unmanaged<OperationSized>>, from: Int, to: Int) {
        self.kept = kept
        range = from..<to
    }

    deinit {
        for i in range { kept[i].release() }
        kept.deallocate()
    }
}

/// N `add { }` on `queue` from this thread, then `wait`; the same for either queue type.
private func addAndWait<Q>(_ tasks: Int, name: String, who: String, queue: Q, width: Int?,
                           setWidth: (Q, Int) -> Void, add: (Q, @escaping @Sendable () -> Void) -> Void,
                           wait: (Q) -> Void) throws -> Double {
    if let width { setWidth(queue, width) }
    let c = Countdown(tasks)
    let t = timed {
        for _ in 0..<tasks { add(queue) { c.hit() } }
        wait(queue)
    }.ns
    guard c.remaining.load(ordering: .acquiring) == 0 else { throw BenchFailure("\(name): \(who) lost operations") }
    return t
}

/// A chain of N operations, each depending on the previous, added in reverse order
/// (so every operation but the last waits when added). Foundation's Linux queue
/// rescans waiting operations on every pass, and overflows its stack releasing long
/// chains, so it runs at the largest size it survives.
///
/// Beside it, at the same size, the chain's operations (the same blocks) in order on a
/// serial queue, without their dependencies: added while they run (`spindle-serial`),
/// and added while the queue is suspended, then resumed (`spindle-serial-built`). A
/// chain added in reverse cannot start before its last add, so its adding thread and
/// its worker never run side by side; the built serial queue has that shape without a
/// single dependency, and is the least such a chain can cost on Spindle's queue. The
/// same pair on a serial DispatchQueue (`dispatch-serial`, and `dispatch-serial-built`
/// with `suspend()` and `resume()`) shows what that shape costs a peer.
func dependencyChainCase(spindleTasks: Int, foundationTasks: Int, reps: Int) throws -> CaseResult {
    let serialPairs = [("spindle", "spindle-serial"), ("spindle", "spindle-serial-built"),
                       ("spindle-serial-built", "spindle-serial"), ("dispatch-serial-built", "dispatch-serial"),
                       ("spindle-serial", "dispatch-serial"), ("spindle-serial-built", "dispatch-serial-built")]
    var r = try measure("dependency-chain", tasks: spindleTasks, reps: reps, reference: "foundation", alsoVs: serialPairs, [
        SystemRun(name: "spindle", tasks: spindleTasks) {
            try chain(spindleTasks, make: { Spindle.BlockOperation(block: $0) }, queue: Spindle.OperationQueue(),
                      add: { q, ops in for op in ops.reversed() { q.addOperation(op) } },
                      wait: { $0.waitUntilAllOperationsAreFinished() },
                      depend: { $0.addDependency($1) }, who: "spindle")
        },
        SystemRun(name: "foundation", tasks: foundationTasks) {
            try chain(foundationTasks, make: { Foundation.BlockOperation(block: $0) }, queue: Foundation.OperationQueue(),
                      add: { q, ops in for op in ops.reversed() { q.addOperation(op) } },
                      wait: { $0.waitUntilAllOperationsAreFinished() },
                      depend: { $0.addDependency($1) }, who: "foundation")
        },
        SystemRun(name: "spindle-serial") { try spindleSerial(spindleTasks, built: false) },
        SystemRun(name: "spindle-serial-built") { try spindleSerial(spindleTasks, built: true) },
        SystemRun(name: "dispatch-serial") { try dispatchSerial(spindleTasks, built: false) },
        SystemRun(name: "dispatch-serial-built") { try dispatchSerial(spindleTasks, built: true) },
    ])
    r.note = "spindle at \(spindleTasks) operations, foundation at \(foundationTasks): per-operation cost; "
        + "spindle-serial, dispatch-serial: the chain's blocks, as many, in order on a serial queue without dependencies, "
        + "added while they run; *-built: added to the suspended queue, which is then resumed, "
        + "so that none runs before the last is added, as in a chain added in reverse"
    return r
}

/// N `BlockOperation`s in order on a serial Spindle queue, no dependencies; `built`:
/// added while the queue is suspended, which is resumed after the last add.
private func spindleSerial(_ n: Int, built: Bool) throws -> Double {
    let next = SharedCounter()
    let queue = Spindle.OperationQueue()
    queue.maxConcurrentOperationCount = 1
    let t = timed {
        if built { queue.isSuspended = true }
        for i in 0..<n { queue.addOperation(Spindle.BlockOperation { next.expect(i) }) }
        if built { queue.isSuspended = false }
        queue.waitUntilAllOperationsAreFinished()
    }.ns
    guard next.value == n, next.outOfOrder == 0 else {
        throw BenchFailure("dependency-chain: spindle-serial\(built ? "-built" : "") ran \(next.value) of \(n), \(next.outOfOrder) out of order")
    }
    return t
}

/// N blocks in order on a serial DispatchQueue; `built`: added while it is suspended.
private func dispatchSerial(_ n: Int, built: Bool) throws -> Double {
    let next = SharedCounter()
    let queue = DispatchQueue(label: "bench.chain-serial")
    let t = timed {
        if built { queue.suspend() }
        for i in 0..<n { queue.async { next.expect(i) } }
        if built { queue.resume() }
        queue.sync {}
    }.ns
    guard next.value == n, next.outOfOrder == 0 else {
        throw BenchFailure("dependency-chain: dispatch-serial\(built ? "-built" : "") ran \(next.value) of \(n), \(next.outOfOrder) out of order")
    }
    return t
}

private func chain<Op: AnyObject, Q>(_ n: Int, make: (@escaping @Sendable () -> Void) -> Op, queue: Q,
                                     add: (Q, [Op]) -> Void, wait: (Q) -> Void,
                                     depend: (Op, Op) -> Void, who: String) throws -> Double {
    let next = SharedCounter()
    var ops: [Op] = []
    ops.reserveCapacity(n)
    let t = timed {
        for i in 0..<n {
            let op = make { next.expect(i) }
            if let prev = ops.last { depend(op, prev) }
            ops.append(op)
        }
        add(queue, ops)
        wait(queue)
    }.ns
    guard next.value == n, next.outOfOrder == 0 else {
        throw BenchFailure("dependency-chain: \(who) ran \(next.value) of \(n), \(next.outOfOrder) out of order")
    }
    // Release the chain outside the timed region, tail first: each released operation
    // then frees only itself (its dependency is still held by the array), so even a
    // recursive deinit (Foundation's) never runs deep.
    while !ops.isEmpty { ops.removeLast() }
    return t
}

/// Counts chain steps; the chain runs strictly one at a time, so plain fields behind
/// the dependency edges' happens-before are enough — but a lock keeps it obviously so.
final class SharedCounter: @unchecked Sendable {
    private let lock = NSLock()
    private(set) var value = 0
    private(set) var outOfOrder = 0
    func expect(_ i: Int) {
        lock.lock()
        if value != i { outOfOrder += 1 }
        value = i + 1
        lock.unlock()
    }
}

/// N operations that each block for about a millisecond (a sleep: no CPU) at width W,
/// from one thread, then wait for all: how many a queue keeps blocked at once, which is
/// the width only if the pool adds threads while its workers block. Dispatch runs the
/// same blocks on a concurrent queue under a semaphore of W.
func blockingCase(tasks: Int, width: Int, reps: Int) throws -> CaseResult {
    var r = try measure("blocking", tasks: tasks, reps: reps, reference: "foundation", [
        SystemRun(name: "spindle") {
            try addAndWait(tasks, name: "blocking", who: "spindle", queue: Spindle.OperationQueue(), width: width,
                           setWidth: { $0.maxConcurrentOperationCount = $1 },
                           add: { q, hit in q.addOperation { blockOneMillisecond(); hit() } },
                           wait: { $0.waitUntilAllOperationsAreFinished() })
        },
        SystemRun(name: "foundation") {
            try addAndWait(tasks, name: "blocking", who: "foundation", queue: Foundation.OperationQueue(), width: width,
                           setWidth: { $0.maxConcurrentOperationCount = $1 },
                           add: { q, hit in q.addOperation { blockOneMillisecond(); hit() } },
                           wait: { $0.waitUntilAllOperationsAreFinished() })
        },
        SystemRun(name: "dispatch") {
            let slots = DispatchSemaphore(value: width)
            let group = DispatchGroup()
            let c = Countdown(tasks)
            let t = timed {
                for _ in 0..<tasks {
                    slots.wait()
                    DispatchQueue.global().async(group: group) {
                        blockOneMillisecond()
                        c.hit()
                        slots.signal()
                    }
                }
                group.wait()
            }.ns
            guard c.remaining.load(ordering: .acquiring) == 0 else { throw BenchFailure("blocking: dispatch lost blocks") }
            return t
        },
    ])
    r.note = "each operation sleeps 1 ms; width \(width); a queue that keeps \(width) blocked at once takes ~\(1_000 / width) us per operation"
    return r
}

/// The blocking case's work: a sleep, which uses no CPU.
@Sendable private func blockOneMillisecond() { usleep(1_000) }
