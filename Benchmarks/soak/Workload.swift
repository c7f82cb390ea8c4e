import Spindle
import Synchronization

/// One round of the soak's mix: every kind of work Spindle runs, each item marked in
/// a slot of its own, so that the round can tell an item lost (0) from one run twice
/// (2 or more). A round ends only when all of its work has finished.
final class Round: @unchecked Sendable {
    /// Runs per item; `capacity` slots.
    private let runs: UnsafeMutablePointer<Atomic<UInt8>>
    private let capacity: Int
    /// Items a cancellation may rightly have kept from running (their slot may be 0).
    let cancellable = Locked<Set<Int>>([])
    private let next = Atomic<Int>(0)

    init(items: Int) {
        capacity = items
        runs = .allocate(capacity: items)
        for i in 0..<items { (runs + i).initialize(to: Atomic(0)) }
    }

    deinit {
        runs.deinitialize(count: capacity)
        runs.deallocate()
    }

    /// A fresh item's slot.
    func item() -> Int {
        let i = next.add(1, ordering: .relaxed).oldValue
        precondition(i < capacity, "a round issued more than \(capacity) items")
        return i
    }
    var issued: Int { next.load(ordering: .relaxed) }

    func ran(_ item: Int) { runs[item].add(1, ordering: .relaxed) }

    /// Items lost, and items run more than once.
    func verdict() -> (lost: [Int], twice: [Int]) {
        let maybe = cancellable.locked { $0 }
        var lost: [Int] = [], twice: [Int] = []
        for i in 0..<issued {
            let n = runs[i].load(ordering: .relaxed)
            if n == 0 && !maybe.contains(i) { lost.append(i) }
            if n > 1 { twice.append(i) }
        }
        return (lost, twice)
    }
}

/// A value behind an NSLock: ThreadSanitizer sees a pthread mutex's hand-over, which it
/// does not see for Synchronization's Mutex (scripts/check-swift.py).
final class Locked<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value
    init(_ value: Value) { self.value = value }
    func locked<T>(_ body: (inout Value) -> T) -> T {
        lock.lock()
        defer { lock.unlock() }
        return body(&value)
    }
}

/// A background-class actor, for the actor part of the mix.
actor Tally {
    static let executor = ActorExecutor(qualityOfService: .background)
    nonisolated var unownedExecutor: UnownedSerialExecutor { Self.executor.asUnownedSerialExecutor() }
    private var count = 0
    func add(_ round: Round, _ item: Int) {
        count += 1
        round.ran(item)
    }
}

/// The mix. Random choices come from a seeded generator, so a failing round can be
/// replayed with `--seed`.
struct Workload {
    var rng: SplitMix
    let queues: [OperationQueue]
    let tally = Tally()

    init(seed: UInt64) {
        rng = SplitMix(seed: seed)
        let classes: [QualityOfService] = [.userInitiated, .default, .utility, .background]
        queues = classes.enumerated().map { i, qos in
            let q = OperationQueue()
            q.name = "soak-\(i)"
            q.qualityOfService = qos
            q.maxConcurrentOperationCount = [1, 2, OperationQueue.defaultMaxConcurrentOperationCount, 4][i]
            return q
        }
    }

    /// One round: a DAG across the queues with cancellation, suspension, width and
    /// priority churn; direct submits; fork-join; a parallel loop; async offload, tasks
    /// on a pool and an actor; a pool made and shut down; blocking work that brings
    /// spares. Returns when every part has finished.
    mutating func run(_ round: Round) throws {
        try dag(round)
        try direct(round)
        forkJoin(round)
        try async(round)
        try ownPool(round)
        for q in queues { q.waitUntilAllOperationsAreFinished() }
    }

    private mutating func dag(_ round: Round) throws {
        var ops: [BlockOperation] = [], ids: [Int] = []
        let n = 60 + rng.next(40)
        for _ in 0..<n {
            let item = round.item()
            ids.append(item)
            let op = BlockOperation { round.ran(item) }
            op.queuePriority = [.veryLow, .low, .normal, .high, .veryHigh][rng.next(5)]
            if rng.next(8) == 0 { op.qualityOfService = .userInteractive }
            // Dependencies only on earlier operations: a DAG.
            for _ in 0..<rng.next(3) where !ops.isEmpty { op.addDependency(ops[rng.next(ops.count)]) }
            if rng.next(10) == 0 {
                round.cancellable.locked { _ = $0.insert(item) }
                op.cancel()
            }
            ops.append(op)
        }
        let suspended = queues[rng.next(queues.count)]
        suspended.isSuspended = true
        for (i, op) in ops.enumerated() { queues[i % queues.count].addOperation(op) }
        // Churn while they run: a late cancellation, a width change, then resume.
        for _ in 0..<3 {
            let k = rng.next(ops.count)
            if !ops[k].isFinished {
                round.cancellable.locked { _ = $0.insert(ids[k]) }
                ops[k].cancel()
            }
        }
        let q = queues[rng.next(queues.count)]
        let width = q.maxConcurrentOperationCount
        q.maxConcurrentOperationCount = 1 + rng.next(3)
        suspended.isSuspended = false
        q.maxConcurrentOperationCount = width
        // A blocking operation, which a spare worker stands in for.
        let item = round.item()
        queues[1].addOperation { _ = ThreadPool.blocking { usleep(200) }; round.ran(item) }
    }

    private mutating func direct(_ round: Round) throws {
        let done = DispatchGroup()
        for _ in 0..<(50 + rng.next(50)) {
            let item = round.item()
            done.enter()
            try ThreadPool.shared.submit { round.ran(item); done.leave() }
        }
        done.wait()
    }

    private func forkJoin(_ round: Round) {
        let pool = ThreadPool.shared
        @Sendable func fib(_ n: Int) -> Int {
            n < 12 ? (n < 2 ? n : fib(n - 1) + fib(n - 2)) : { let (a, b) = pool.join({ fib(n - 1) }, { fib(n - 2) }); return a + b }()
        }
        let item = round.item()
        if pool.run({ fib(18) }) == 2584 { round.ran(item) }
        let items = (0..<64).map { _ in round.item() }
        pool.concurrentPerform(iterations: items.count) { round.ran(items[$0]) }
    }

    private mutating func async(_ round: Round) throws {
        let offloads = (0..<(10 + rng.next(10))).map { _ in round.item() }
        let tasks = (0..<8).map { _ in round.item() }
        let actorItems = (0..<8).map { _ in round.item() }
        let tally = self.tally
        let done = DispatchSemaphore(value: 0)
        Task {
            await withTaskGroup(of: Void.self) { group in
                for item in offloads {
                    group.addTask { _ = try? await ThreadPool.forQualityOfService(.utility).run { round.ran(item) } }
                }
                for item in tasks {
                    group.addTask(executorPreference: ThreadPool.shared) { round.ran(item) }
                }
                for item in actorItems { group.addTask { await tally.add(round, item) } }
            }
            done.signal()
        }
        done.wait()
    }

    private mutating func ownPool(_ round: Round) throws {
        let pool = try ThreadPool(workers: 1 + rng.next(3))
        let items = (0..<20).map { _ in round.item() }
        for item in items { try pool.submit { round.ran(item) } }
        let blocked = round.item()
        try pool.submit { _ = ThreadPool.blocking { usleep(100) }; round.ran(blocked) }
        try pool.shutdown(.drain)
    }
}

/// SplitMix64: small, seedable, good enough to pick work.
struct SplitMix {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next(_ bound: Int) -> Int {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return Int((z ^ (z >> 31)) % UInt64(max(bound, 1)))
    }
}
