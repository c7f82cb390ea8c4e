import CSpindle
import Dispatch
import Synchronization

/// A queue that runs operations on Spindle's work-stealing pool, with the semantics of
/// Foundation's `OperationQueue`.
///
/// Ready operations start in order of ``Operation/queuePriority`` (FIFO within a
/// priority), at most ``maxConcurrentOperationCount`` at a time. An operation becomes
/// ready when its dependencies finish — the queue is told once, by the last dependency
/// to finish; it never rescans waiting operations.
///
/// ### How it schedules
/// The queue keeps five FIFO ready lists (one per priority) and a running count under
/// one lock. Starting an operation submits it to the pool for its quality of service;
/// an operation added from inside a running operation goes on the current worker's own
/// deque (no shared cache line). When an operation finishes, the queue takes the next
/// ready ones while it still holds the lock and submits them after releasing it.
///
/// Rejected alternative: Foundation-on-Linux's design, a list of all operations scanned
/// on every scheduling pass for one that is ready. It is O(waiting) per pass, which is
/// what makes a 5 000-operation dependency chain cost ~700 µs per operation there.
open class OperationQueue: @unchecked Sendable {
    // @unchecked: all mutable state is in `state` (a Mutex).

    /// The default for ``maxConcurrentOperationCount``: as many as the pool's width.
    public static let defaultMaxConcurrentOperationCount: Int = -1

    struct State {
        var ready = (OpFIFO(), OpFIFO(), OpFIFO(), OpFIFO(), OpFIFO())
        /// Unfinished operations in the order they were added (nil: a hole left by a
        /// finished one; compacted when holes dominate).
        var all: [Operation?] = []
        var holes = 0
        var count = 0
        var running = 0
        var maxConcurrent = OperationQueue.defaultMaxConcurrentOperationCount
        var suspended = false
        var name: String
        var qualityOfService: QualityOfService = .default
        var underlyingQueue: DispatchQueue?
        var lastBarrier: Operation?
        var waiters: [Waiter] = []
        var countObservers: [(id: Int, handler: @Sendable (Int) -> Void)] = []
        var nextObserverID = 0
        var progress: Progress?

        mutating func push(_ op: Operation, level: Int) {
            switch level {
            case 0: ready.0.push(op)
            case 1: ready.1.push(op)
            case 2: ready.2.push(op)
            case 3: ready.3.push(op)
            default: ready.4.push(op)
            }
        }

        /// The highest-priority ready operation, skipping retired ones.
        mutating func popReady() -> Operation? {
            while true {
                let op: Operation?
                if !ready.4.isEmpty { op = ready.4.pop() }
                else if !ready.3.isEmpty { op = ready.3.pop() }
                else if !ready.2.isEmpty { op = ready.2.pop() }
                else if !ready.1.isEmpty { op = ready.1.pop() }
                else if !ready.0.isEmpty { op = ready.0.pop() }
                else { return nil }
                if let op, !op.queueRetired { return op }
            }
        }

        /// Takes the operations that may start now and counts them as running.
        mutating func takeStartable() -> Startable {
            guard !suspended else { return .none }
            var out = Startable.none
            while maxConcurrent < 0 || running < maxConcurrent, let op = popReady() {
                running += 1
                op.queueStarted = true
                out.append(op)
            }
            return out
        }
    }

    let state: Mutex<State>
    /// Set once anyone observes `operationCount`, so unobserved queues skip the work.
    let hasCountObservers = Atomic<Bool>(false)
    private static let counter = Atomic<Int>(0)

    /// Creates a queue. It starts operations as soon as they are ready.
    public init() {
        let n = OperationQueue.counter.add(1, ordering: .relaxed).newValue
        state = Mutex(State(name: "Spindle.OperationQueue \(n)"))
    }

    init(main: Void) {
        var s = State(name: "NSOperationQueue Main Queue")
        s.maxConcurrent = 1
        s.underlyingQueue = DispatchQueue.main
        s.qualityOfService = .userInteractive
        state = Mutex(s)
    }

    /// The queue of the main thread: runs its operations there, one at a time.
    public static let main = OperationQueue(main: ())

    /// The queue of the operation the calling thread is running; on the main thread,
    /// outside any operation, the main queue; nil elsewhere.
    public class var current: OperationQueue? {
        if let q = ThreadState.current.currentQueue { return q.takeUnretainedValue() }
        if Thread.isMainThread { return .main }
        return nil
    }

    // MARK: - Adding

    /// Adds an operation. It starts when it is ready and the queue has room.
    ///
    /// Traps when `op` is already in a queue (this one or another), executing or
    /// finished: Foundation treats these as programmer errors.
    open func addOperation(_ op: Operation) {
        enqueue(op)
    }

    /// Wraps `block` in a ``BlockOperation`` and adds it.
    open func addOperation(_ block: @escaping @Sendable () -> Void) {
        enqueue(BlockOperation(block: block))
    }

    /// Adds several operations; with `wait`, blocks until they have all finished.
    open func addOperations(_ ops: [Operation], waitUntilFinished wait: Bool) {
        for op in ops { enqueue(op) }
        if wait { for op in ops { op.waitUntilFinished() } }
    }

    /// Adds a barrier: `barrier` runs after every operation added before it has
    /// finished, and operations added after it start only once it has finished.
    open func addBarrierBlock(_ barrier: @escaping @Sendable () -> Void) {
        let op = BlockOperation(block: barrier)
        let before = state.locked { s -> [Operation] in
            let b = s.all.compactMap { $0 }
            s.lastBarrier = op
            return b
        }
        for p in before { op.addDependency(p) }
        enqueue(op, isBarrier: true)
    }

    func enqueue(_ op: Operation, isBarrier: Bool = false) {
        // Claim the operation for this queue, or trap on misuse, leaving it untouched.
        let (problem, noDependencies, level) = op.guarded.locked { g -> (String?, Bool, Int) in
            if g.queue != nil { return ("is already in an operation queue", false, 0) }
            if op.finishHandled.load(ordering: .acquiring) || g.phase == .finished { return ("has already finished", false, 0) }
            if g.phase == .executing { return ("is executing", false, 0) }
            g.queue = self
            return (nil, g.unfinished == 0, g.queuePriority.level)
        }
        if let problem {
            fatalError("OperationQueue.addOperation: \(op.describe()) \(problem); an operation can be added to one queue, once, before it starts")
        }
        // The common case — no dependencies, ready — takes the queue lock once: register,
        // push on the ready list and take what may start, together.
        let readyNow = noDependencies && (op.isCancelled || op.isReady)
        let (barrier, start, config) = state.locked { s -> (Operation?, Startable, DispatchConfig?) in
            op.queueSlot = s.all.count
            s.all.append(op)
            s.count += 1
            if !isBarrier, let b = s.lastBarrier, !b.finishHandled.load(ordering: .acquiring) { return (b, .none, nil) }
            guard readyNow, !op.readySignalled.exchange(true, ordering: .acquiringAndReleasing) else { return (nil, .none, nil) }
            s.push(op, level: level)
            let start = s.takeStartable()
            return (nil, start, start.isEmpty ? nil : DispatchConfig(s))
        }
        if hasCountObservers.load(ordering: .acquiring) { notifyCountChange() }
        if let barrier { op.addDependency(barrier) }
        if let config { dispatch(start, config) } else { op.evaluateReadiness() }
    }

    // MARK: - Scheduling

    func operationBecameReady(_ op: Operation) {
        let level = op.queuePriority.level
        let (start, config) = state.locked { s -> (Startable, DispatchConfig) in
            s.push(op, level: level)
            return (s.takeStartable(), DispatchConfig(s))
        }
        dispatch(start, config)
    }

    func operationFinished(_ op: Operation) {
        let (start, config, waiters, count, observers) = state.locked { s -> (Startable, DispatchConfig, [Waiter], Int, [@Sendable (Int) -> Void]) in
            if op.queueStarted { s.running -= 1 } else { op.queueRetired = true }
            if op.queueSlot >= 0 && op.queueSlot < s.all.count && s.all[op.queueSlot] === op {
                s.all[op.queueSlot] = nil
                s.holes += 1
                if s.holes > 64 && s.holes * 2 > s.all.count { compact(&s) }
            }
            op.queueSlot = -1
            s.count -= 1
            if s.lastBarrier === op { s.lastBarrier = nil }
            if let p = s.progress, p.totalUnitCount > 0 { p.completedUnitCount += 1 }
            var w: [Waiter] = []
            if s.count == 0 {
                w = s.waiters
                s.waiters = []
            }
            let observers = s.countObservers.isEmpty ? [] : s.countObservers.map(\.handler)
            return (s.takeStartable(), DispatchConfig(s), w, s.count, observers)
        }
        for o in observers { o(count) }
        for w in waiters { w.signal() }
        dispatch(start, config)
    }

    private func compact(_ s: inout State) {
        var out: [Operation?] = []
        out.reserveCapacity(s.count)
        for case let op? in s.all {
            op.queueSlot = out.count
            out.append(op)
        }
        s.all = out
        s.holes = 0
    }

    /// Where started operations go, read under the lock together with them.
    struct DispatchConfig {
        let underlying: DispatchQueue?
        let qualityOfService: QualityOfService
        init(_ s: State) {
            underlying = s.underlyingQueue
            qualityOfService = s.qualityOfService
        }
    }

    private func dispatch(_ ops: Startable, _ config: DispatchConfig) {
        ops.forEach { op in
            if let underlying = config.underlying {
                let run = UncheckedSendableBox((self, op))
                underlying.async { run.value.0.run(run.value.1) }
            } else {
                let pool = QoSPools.pool(for: op.effectiveQoS(queueDefault: config.qualityOfService))
                OpTask.submit(op, queue: self, pool: pool)
            }
        }
    }

    /// Takes what may start now and starts it (after a width or suspension change).
    private func startWhatCan(_ change: (inout State) -> Void) {
        let (start, config) = state.locked { s -> (Startable, DispatchConfig) in
            change(&s)
            return (s.takeStartable(), DispatchConfig(s))
        }
        dispatch(start, config)
    }

    /// Runs one operation on the current thread, as the queue's runner.
    func run(_ op: Operation) {
        let ts = ThreadState.current
        let savedQueue = ts.currentQueue
        let savedOp = ts.currentOperation
        ts.currentQueue = Unmanaged.passUnretained(self)
        ts.currentOperation = Unmanaged.passUnretained(op)
        op.startedByQueue.store(true, ordering: .releasing)
        op.start()
        ts.currentQueue = savedQueue
        ts.currentOperation = savedOp
    }

    // MARK: - Control

    /// Cancels every operation in the queue. Those not started finish without running
    /// `main()`; their completion blocks still run.
    open func cancelAllOperations() {
        for op in operations { op.cancel() }
    }

    /// Blocks until the queue has no operations left. Called from a pool thread, that
    /// thread keeps running other pool work while it waits.
    open func waitUntilAllOperationsAreFinished() {
        var latch = spindle_latch()
        spindle_latch_init(&latch)
        withUnsafeMutablePointer(to: &latch) { l in
            let registered = state.locked { s -> Bool in
                if s.count == 0 { return false }
                s.waiters.append(Waiter(latch: l))
                return true
            }
            if registered { spindle_latch_wait(l) }
        }
    }

    /// Suspends the calling task until the queue has no operations left, without
    /// blocking a thread (Spindle's addition).
    public func allOperationsFinished() async {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let registered = state.locked { s -> Bool in
                if s.count == 0 { return false }
                s.waiters.append(Waiter(continuation: c))
                return true
            }
            if !registered { c.resume() }
        }
    }

    /// The operations in the queue that have not finished, in the order they were added.
    open var operations: [Operation] { state.locked { $0.all.compactMap { $0 } } }

    /// How many operations are in the queue and not finished.
    open var operationCount: Int { state.locked { $0.count } }

    /// How many operations may run at once; ``defaultMaxConcurrentOperationCount``
    /// (-1) means as many as the pool runs. 1 makes the queue serial. Lowering it does
    /// not stop running operations. Values below -1 trap, as 0 would stall the queue
    /// only on purpose: use ``isSuspended`` for that.
    open var maxConcurrentOperationCount: Int {
        get { state.locked { $0.maxConcurrent } }
        set {
            precondition(newValue >= -1, "OperationQueue.maxConcurrentOperationCount must be -1 (the default) or >= 0, got \(newValue)")
            startWhatCan { $0.maxConcurrent = newValue }
        }
    }

    /// While true, the queue starts no operation; running ones continue, and added or
    /// cancelled ones wait. Setting it back to false starts what is ready.
    open var isSuspended: Bool {
        get { state.locked { $0.suspended } }
        set { startWhatCan { $0.suspended = newValue } }
    }

    /// The queue's name; unique by default.
    open var name: String? {
        get { state.locked { $0.name } }
        set { state.locked { $0.name = newValue ?? "" } }
    }

    /// The quality of service for operations that do not set their own.
    open var qualityOfService: QualityOfService {
        get { state.locked { $0.qualityOfService } }
        set { state.locked { $0.qualityOfService = newValue } }
    }

    /// When set, operations run on this dispatch queue instead of Spindle's pool.
    /// Changing it while the queue holds operations traps (Foundation forbids it too).
    open var underlyingQueue: DispatchQueue? {
        get { state.locked { $0.underlyingQueue } }
        set {
            let ok = state.locked { s -> Bool in
                guard s.count == 0 else { return false }
                s.underlyingQueue = newValue
                return true
            }
            if !ok { fatalError("OperationQueue.underlyingQueue was changed while the queue held operations") }
        }
    }

    /// Progress of the queue. Once `totalUnitCount` is set, every operation that
    /// finishes adds one completed unit.
    open var progress: Progress {
        state.locked { s in
            if let p = s.progress { return p }
            let p = Progress(totalUnitCount: 0)
            s.progress = p
            return p
        }
    }

    /// Calls `handler` with the new ``operationCount`` whenever it changes (Spindle's
    /// addition). Runs synchronously on the thread that changed it; keep it quick.
    /// Returns a token; pass it to ``removeOperationCountObserver(_:)`` to stop.
    @discardableResult
    public func onOperationCountChange(_ handler: @escaping @Sendable (Int) -> Void) -> Int {
        hasCountObservers.store(true, ordering: .releasing)
        return state.locked { s in
            s.nextObserverID += 1
            s.countObservers.append((s.nextObserverID, handler))
            return s.nextObserverID
        }
    }

    /// Stops the observer registered under `token`.
    public func removeOperationCountObserver(_ token: Int) {
        state.locked { s in s.countObservers.removeAll { $0.id == token } }
    }

    private func notifyCountChange() {
        let (count, observers) = state.locked { s in (s.count, s.countObservers.map(\.handler)) }
        for o in observers { o(count) }
    }
}

/// The operations a scheduling step lets start: almost always none or one, which
/// need no array (and no allocation) on the per-operation path.
enum Startable {
    case none
    case one(Operation)
    case many([Operation])

    mutating func append(_ op: Operation) {
        switch self {
        case .none: self = .one(op)
        case .one(let first): self = .many([first, op])
        case .many(var all):
            self = .none
            all.append(op)
            self = .many(all)
        }
    }

    var isEmpty: Bool { if case .none = self { return true } else { return false } }

    func forEach(_ body: (Operation) -> Void) {
        switch self {
        case .none: break
        case .one(let op): body(op)
        case .many(let all): all.forEach(body)
        }
    }
}

/// A FIFO of operations: a ring buffer that grows by doubling.
struct OpFIFO {
    private var buf: [Operation?] = []
    private var head = 0
    private var n = 0

    var isEmpty: Bool { n == 0 }

    mutating func push(_ op: Operation) {
        if n == buf.count {
            var grown = [Operation?](repeating: nil, count: max(8, buf.count * 2))
            for i in 0..<n { grown[i] = buf[(head + i) % buf.count] }
            buf = grown
            head = 0
        }
        buf[(head + n) % buf.count] = op
        n += 1
    }

    mutating func pop() -> Operation? {
        guard n > 0 else { return nil }
        let op = buf[head]
        buf[head] = nil
        head = (head + 1) % buf.count
        n -= 1
        return op
    }
}

struct UncheckedSendableBox<T>: @unchecked Sendable {
    let value: T
    init(_ v: T) { value = v }
}

/// An operation submitted to the pool: `[spindle_task | queue | op]` in one
/// allocation, both references retained until the task runs.
enum OpTask {
    struct Payload {
        var queue: Unmanaged<OperationQueue>
        var op: Unmanaged<Operation>
    }

    static let offset: Int = {
        let a = MemoryLayout<Payload>.alignment
        return (MemoryLayout<spindle_task>.stride + a - 1) / a * a
    }()

    static func submit(_ op: Operation, queue: OperationQueue, pool: ThreadPool) {
        let raw = UnsafeMutableRawPointer.allocate(byteCount: offset + MemoryLayout<Payload>.size, alignment: 16)
        let task = raw.initializeMemory(as: spindle_task.self, repeating: spindle_task(spindle_private: (nil, nil), run: { task, _ in
            // A pool only cancels tasks when it is destroyed; the pools operations run
            // on live for the whole process, so every task runs.
            let raw = UnsafeMutableRawPointer(task!)
            let p = (raw + OpTask.offset).assumingMemoryBound(to: Payload.self).move()
            raw.deallocate()
            let queue = p.queue.takeRetainedValue()
            let op = p.op.takeRetainedValue()
            queue.run(op)
        }), count: 1)
        (raw + offset).initializeMemory(as: Payload.self, repeating: Payload(queue: .passRetained(queue), op: .passRetained(op)), count: 1)
        let rc = spindle_submit_task(pool.raw, task)
        // Process-wide pools refuse shutdown (ThreadPool.Error.processWidePool), so this
        // cannot fail short of a bug in the engine.
        precondition(rc == 0, "Spindle: a process-wide pool refused an operation (engine bug, rc \(rc))")
    }
}
