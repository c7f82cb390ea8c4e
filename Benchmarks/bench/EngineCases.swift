import Dispatch
import Foundation
import Spindle
import Synchronization

/// Counts down from `n`; the thread that reaches zero signals one waiter.
final class Countdown: Sendable {
    /// Keeps `remaining` off the cache line of the object's header, whose reference
    /// count the adding thread changes as it makes and frees blocks that capture the
    /// countdown, while the workers that run them decrement `remaining`. 14 words put
    /// `remaining` 128 bytes into the object: two lines past the 16-byte header, wherever
    /// malloc places it.
    private let padding: (Int, Int, Int, Int, Int, Int, Int, Int, Int, Int, Int, Int, Int, Int) = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    let remaining: Atomic<Int>
    let done = DispatchSemaphore(value: 0)
    init(_ n: Int) { remaining = Atomic(n) }
    func hit() {
        if remaining.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 { done.signal() }
    }
    func wait() { done.wait() }
}

final class IntBox: @unchecked Sendable {
    var value = 0
}

// MARK: submit

/// N empty closures from a thread outside the pool, then wait for all.
func submitCase(pool: ThreadPool, nio: NIOPeer, tasks: Int, reps: Int) throws -> CaseResult {
    func spindleRun() throws -> Double {
        let c = Countdown(tasks)
        let work: @Sendable () -> Void = { c.hit() }
        let t = try timed {
            for _ in 0..<tasks { try pool.submit(work) }
            c.wait()
        }.ns
        guard c.remaining.load(ordering: .acquiring) == 0 else { throw BenchFailure("submit: spindle lost tasks") }
        return t
    }
    return try measure("submit", tasks: tasks, reps: reps, reference: "dispatch",
                       alsoVs: [("spindle", "nio"), ("spindle-metrics", "spindle")], [
        SystemRun(name: "spindle") { try spindleRun() },
        SystemRun(name: "spindle-metrics") { try withMetricsPublished(["bench": pool]) { try spindleRun() } },
        SystemRun(name: "dispatch") { try dispatchGroupRun(DispatchQueue.global(), tasks: tasks, name: "submit") },
        SystemRun(name: "nio") {
            let c = Countdown(tasks)
            let t = timed {
                for _ in 0..<tasks { nio.pool.submit { _ in c.hit() } }
                c.wait()
            }.ns
            guard c.remaining.load(ordering: .acquiring) == 0 else { throw BenchFailure("submit: nio lost tasks") }
            return t
        },
    ])
}

/// N closures on `queue` with `async(group:)`, then `group.wait()`; checks they all ran.
func dispatchGroupRun(_ queue: DispatchQueue, tasks: Int, name: String) throws -> Double {
    let c = Countdown(tasks)
    let work: @Sendable () -> Void = { c.hit() }
    let g = DispatchGroup()
    let t = timed {
        for _ in 0..<tasks { queue.async(group: g, execute: work) }
        g.wait()
    }.ns
    guard c.remaining.load(ordering: .acquiring) == 0 else { throw BenchFailure("\(name): dispatch lost work") }
    return t
}

// MARK: fork-join

// Every system's fib does the same arithmetic as the compiled code of the peers it is
// compared with (Benchmarks/peers): rayon's release build and oneTBB's C++ add without
// an overflow check, so the Swift ones use wrapping operators. Swift's checked `+` and
// `-` would add a compare and branch to every call, leaves included: work that is not
// the fork's. fib(28) is far from overflowing either way.
func fibSerial(_ n: Int) -> Int { n < 2 ? n : fibSerial(n &- 1) &+ fibSerial(n &- 2) }

/// Number of forks a cut-off recursive fib performs.
func fibSpawns(_ n: Int, _ cutoff: Int) -> Int {
    var memo = [Int: Int]()
    func go(_ n: Int) -> Int {
        if n < cutoff { return 0 }
        if let m = memo[n] { return m }
        let r = 1 + go(n - 1) + go(n - 2)
        memo[n] = r
        return r
    }
    return go(n)
}

func fibSpindle(_ pool: ThreadPool, _ n: Int, _ cutoff: Int) -> Int {
    if n < cutoff { return fibSerial(n) }
    let (a, b) = pool.join({ fibSpindle(pool, n &- 1, cutoff) }, { fibSpindle(pool, n &- 2, cutoff) })
    return a &+ b
}

/// Dispatch's fork-join without blocking: one `async` per fork and a `notify`
/// continuation per join. (The blocking form — `group.wait()` inside global-queue work —
/// deadlocks once 255 threads are parked in waits, which this case reaches.)
func fibDispatch(_ n: Int, _ cutoff: Int, _ completion: @escaping @Sendable (Int) -> Void) {
    if n < cutoff { completion(fibSerial(n)); return }
    let g = DispatchGroup()
    let a = IntBox(), b = IntBox()
    g.enter()
    DispatchQueue.global().async { fibDispatch(n &- 1, cutoff) { a.value = $0; g.leave() } }
    g.enter()
    fibDispatch(n &- 2, cutoff) { b.value = $0; g.leave() }
    g.notify(queue: .global()) { completion(a.value &+ b.value) }
}

func fibTaskGroup(_ n: Int, _ cutoff: Int) async -> Int {
    if n < cutoff { return fibSerial(n) }
    return await withTaskGroup(of: Int.self) { g in
        g.addTask { await fibTaskGroup(n &- 2, cutoff) }
        let a = await fibTaskGroup(n &- 1, cutoff)
        return a &+ (await g.next()!)
    }
}

/// Blocks the calling (non-async) thread on an async computation.
func blockOn<T: Sendable>(_ body: @escaping @Sendable () async -> T) -> T {
    let box = ResultBox<T>()
    let sem = DispatchSemaphore(value: 0)
    Task.detached {
        box.value = await body()
        sem.signal()
    }
    sem.wait()
    return box.value!
}

final class ResultBox<T>: @unchecked Sendable {
    var value: T?
}

/// Recursive fib split down to `cutoff`, spawning from inside the workers. The figure
/// is wall time divided by the number of forks, so it is the cost of one fork plus a
/// small leaf (fib(cutoff-1), a few dozen additions).
func forkJoinCase(pool: ThreadPool, n: Int, cutoff: Int, reps: Int) throws -> CaseResult {
    let expected = fibSerial(n)
    let spawns = fibSpawns(n, cutoff)
    func check(_ r: Int, _ who: String) throws {
        guard r == expected else { throw BenchFailure("fork-join: \(who) computed fib(\(n)) = \(r), expected \(expected)") }
    }
    let peers = ForkJoinPeers.find()
    var systems = [
        SystemRun(name: "spindle") {
            let (t, r) = timed { pool.run { fibSpindle(pool, n, cutoff) } }
            try check(r, "spindle")
            return t
        },
        SystemRun(name: "dispatch") {
            let (t, r) = timed { () -> Int in
                let box = IntBox()
                let sem = DispatchSemaphore(value: 0)
                fibDispatch(n, cutoff) { box.value = $0; sem.signal() }
                sem.wait()
                return box.value
            }
            try check(r, "dispatch")
            return t
        },
        SystemRun(name: "taskgroup") {
            let (t, r) = timed { blockOn { await fibTaskGroup(n, cutoff) } }
            try check(r, "taskgroup")
            return t
        },
        // The same TaskGroup code with Spindle's pool as its task executor
        // (ThreadPool+TaskExecutor.swift): what async code gains or loses by moving
        // from the cooperative pool onto Spindle's workers.
        SystemRun(name: "taskgroup-on-spindle") {
            let (t, r) = timed { blockOn { await withTaskExecutorPreference(pool) { await fibTaskGroup(n, cutoff) } } }
            try check(r, "taskgroup-on-spindle")
            return t
        },
    ]
    var alsoVs: [(String, String)] = []
    for (name, path) in peers.found {
        systems.append(SystemRun(name: name) { try ForkJoinPeers.run(path, n: n, cutoff: cutoff, expected: expected) })
        alsoVs.append(("spindle", name))
    }
    var result = try measure("fork-join", tasks: spawns, reps: reps, reference: "dispatch", alsoVs: alsoVs, systems)
    result.note = "fib(\(n)), cut-off \(cutoff): \(spawns) forks" + (peers.missing.isEmpty ? "" :
        "; not measured: \(peers.missing.joined(separator: " and ")) (scripts/bench-peers.sh builds them, as scripts/bench.sh does)")
    return result
}

/// rayon and oneTBB running the same fib with the same cut-off (Benchmarks/peers), built
/// by scripts/bench-peers.sh into `SPINDLE_BENCH_PEERS` (scripts/bench.sh sets it), or
/// into Benchmarks/.build/peers. Each repetition is one process: a warm-up run, a pause
/// of 200 ms (what `settle` gives the systems run in this process), then a timed run,
/// whose time the process reports; the pool's start is not in it.
enum ForkJoinPeers {
    static let names = [("rayon", "fib-rayon"), ("tbb", "fib-tbb")]

    static func find() -> (found: [(String, String)], missing: [String]) {
        let env = ProcessInfo.processInfo.environment["SPINDLE_BENCH_PEERS"]
        let dirs = [env, "Benchmarks/.build/peers", ".build/peers"].compactMap { $0 }
        var found: [(String, String)] = [], missing: [String] = []
        for (name, file) in names {
            if let dir = dirs.first(where: { FileManager.default.isExecutableFile(atPath: "\($0)/\(file)") }) {
                found.append((name, "\(dir)/\(file)"))
            } else {
                missing.append(name)
            }
        }
        return (found, missing)
    }

    static func run(_ path: String, n: Int, cutoff: Int, expected: Int) throws -> Double {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = ["\(n)", "\(cutoff)"]
        let out = Pipe()
        process.standardOutput = out
        try process.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        let text = String(decoding: data, as: UTF8.self)
        var fields: [String: String] = [:]
        for pair in text.split(whereSeparator: { $0 == " " || $0 == "\n" }) {
            let kv = pair.split(separator: "=", maxSplits: 1)
            if kv.count == 2 { fields[String(kv[0])] = String(kv[1]) }
        }
        guard process.terminationStatus == 0, let ns = fields["ns"].flatMap(Double.init),
              let result = fields["result"].flatMap(Int.init) else {
            throw BenchFailure("fork-join: \(path) failed (status \(process.terminationStatus)): \(text)")
        }
        guard result == expected else {
            throw BenchFailure("fork-join: \(path) computed fib(\(n)) = \(result), expected \(expected)")
        }
        return ns
    }
}

// MARK: parallel-for

/// A loop of `tasks` cheap iterations (a hash written to an array).
func parallelForCase(pool: ThreadPool, tasks: Int, reps: Int) throws -> CaseResult {
    let buffer = SharedBuffer(capacity: tasks)
    defer { buffer.deallocate() }
    @Sendable func mix(_ i: Int) -> UInt64 {
        let x = UInt64(i) &* 0x9E37_79B9_7F4A_7C15
        return x ^ (x >> 29)
    }
    @Sendable func body(_ i: Int) { buffer[i] = mix(i) }
    func verify(_ who: String) throws {
        for i in stride(from: 0, to: tasks, by: max(1, tasks / 1000)) {
            guard buffer[i] == mix(i) else { throw BenchFailure("parallel-for: \(who) skipped index \(i)") }
        }
        guard buffer[tasks - 1] != 0 else { throw BenchFailure("parallel-for: \(who) skipped the last index") }
        buffer.zero()
    }
    buffer.zero()
    return try measure("parallel-for", tasks: tasks, reps: reps, reference: "dispatch", [
        SystemRun(name: "spindle") {
            let t = timed { pool.concurrentPerform(iterations: tasks) { body($0) } }.ns
            try verify("spindle")
            return t
        },
        SystemRun(name: "dispatch") {
            let t = timed { DispatchQueue.concurrentPerform(iterations: tasks) { body($0) } }.ns
            try verify("dispatch")
            return t
        },
    ])
}

/// A buffer written by disjoint indices from several threads.
struct SharedBuffer: @unchecked Sendable {
    let base: UnsafeMutableBufferPointer<UInt64>
    init(capacity: Int) { base = .allocate(capacity: capacity) }
    subscript(i: Int) -> UInt64 {
        get { base[i] }
        nonmutating set { base[i] = newValue }
    }
    func zero() { base.initialize(repeating: 0) }
    func deallocate() { base.deallocate() }
}
