import CSpindle
import CSpindleTesting
import Foundation
@testable import Spindle
import Synchronization
import XCTest

/// Per-index run counters: each task writes only its own slot, so a task that runs
/// twice shows up as 2 (or, if the two runs overlap, as a ThreadSanitizer report).
final class RunCounts: @unchecked Sendable {
    let slots: UnsafeMutableBufferPointer<Int>
    init(_ n: Int) { slots = .allocate(capacity: n); slots.initialize(repeating: 0) }
    deinit { slots.deallocate() }
    func hit(_ i: Int) { slots[i] += 1 }
    var wrong: [Int] { slots.indices.filter { slots[$0] != 1 } }
}

/// Counts how many closures were released without being run.
final class ReleaseCounter: Sendable {
    let released = Atomic<Int>(0)
}
final class Token: Sendable {
    let counter: ReleaseCounter
    init(_ c: ReleaseCounter) { counter = c }
    deinit { counter.released.add(1, ordering: .relaxed) }
}

func fib(_ pool: ThreadPool, _ n: Int) -> Int {
    if n < 2 { return n }
    let (a, b) = pool.join({ fib(pool, n - 1) }, { fib(pool, n - 2) })
    return a + b
}

final class ThreadPoolTests: XCTestCase {
    func testWorkerCountDefaultsToUsableCPUs() throws {
        let pool = try ThreadPool()
        // Cpus_allowed_list in /proc is the affinity mask, computed independently.
        let status = try String(contentsOfFile: "/proc/self/status", encoding: .utf8)
        let line = status.split(separator: "\n").first { $0.hasPrefix("Cpus_allowed_list:") }!
        var n = 0
        for part in line.split(separator: ":")[1].trimmingCharacters(in: .whitespaces).split(separator: ",") {
            let b = part.split(separator: "-").map { Int($0)! }
            n += b.count == 1 ? 1 : b[1] - b[0] + 1
        }
        // No more than a container's CPU limit allows (ContainerLimitTests), unless an
        // operator's SPINDLE_WORKERS says otherwise.
        XCTAssertEqual(pool.workerCount, defaultWorkerCount(usable: n))
        XCTAssertEqual(try ThreadPool(workers: 3).workerCount, 3)
    }

    /// Errors read as the sentence that names them, `localizedDescription` included.
    func testErrorsDescribeThemselves() {
        for e: ThreadPool.Error in [.shutDown, .overloaded, .processWidePool, .systemError(errno: EAGAIN)] {
            XCTAssertEqual(e.localizedDescription, e.description)
            XCTAssertFalse(e.localizedDescription.contains("error 0"), e.localizedDescription)
        }
    }

    func testWorkersAreNamed() throws {
        let pool = try ThreadPool(workers: 2)
        let names = Mutex<Set<String>>([])
        let done = DispatchSemaphore(value: 0)
        for _ in 0..<2 {
            try pool.submit {
                let name = (try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8))?
                    .trimmingCharacters(in: .whitespacesAndNewlines) ?? "?"

                names.locked { _ = $0.insert(name) }
                done.signal()
            }
        }
        done.wait(); done.wait()
        for n in names.locked({ $0 }) { XCTAssertTrue(n.hasPrefix("spindle-w"), n) }
    }

    func testMillionTasksFromOutsideRunExactlyOnce() throws {
        let n = Stress.count(1_000_000)
        let pool = try ThreadPool()
        let counts = RunCounts(n)
        let left = Atomic<Int>(n)
        let done = DispatchSemaphore(value: 0)
        for i in 0..<n {
            try pool.submit {
                counts.hit(i)
                if left.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 { done.signal() }
            }
        }
        XCTAssertEqual(done.wait(timeout: .now() + 120), .success)
        XCTAssertEqual(counts.wrong.count, 0)
        let executed = pool.stats.reduce(0) { $0 + $1.executed }
        XCTAssertEqual(executed, UInt64(n))
    }

    func testMillionTasksFromInsideWorkersRunExactlyOnce() throws {
        let n = Stress.count(1_000_000)
        let spawners = 100
        let pool = try ThreadPool()
        let counts = RunCounts(n)
        let left = Atomic<Int>(n)
        let done = DispatchSemaphore(value: 0)
        let per = n / spawners
        for s in 0..<spawners {
            try pool.submit {
                let end = s == spawners - 1 ? n : (s + 1) * per
                for i in s * per..<end {
                    try! pool.submit {
                        counts.hit(i)
                        if left.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 { done.signal() }
                    }
                }
            }
        }
        XCTAssertEqual(done.wait(timeout: .now() + 120), .success)
        XCTAssertEqual(counts.wrong.count, 0)
        let s = pool.stats
        XCTAssertEqual(s.reduce(0) { $0 + $1.executed }, UInt64(n + spawners))
        if pool.workerCount > 1 {
            XCTAssertEqual(s.reduce(0) { $0 + $1.stolen }, s.reduce(0) { $0 + $1.stolenFrom })
        }
    }

    /// A worker whose deque is full moves the older half to the injector. With one
    /// worker, no spares and a deque of 4, nobody takes anything off the deque while the
    /// task that fills it runs, so every push past the fourth overflows; none of the
    /// tasks is lost or run twice. Forks overflow the same way, and a join whose frame
    /// went to the injector finds it there.
    func testAFullDequeMovesItsOlderHalfToTheInjectorLosingNothing() throws {
        var c = ThreadPool.Configuration(workers: 1)
        c.dequeCapacity = 4
        // A spare, which the monitor may start for a worker it sees make no progress on
        // a busy machine, could take tasks off the deque.
        c.maxSpareWorkers = 0
        let pool = try ThreadPool(configuration: c)
        let n = 1_000
        let counts = RunCounts(n)
        let left = Atomic<Int>(n)
        let done = DispatchSemaphore(value: 0)
        try pool.submit {
            for i in 0..<n {
                try! pool.submit {
                    counts.hit(i)
                    if left.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 { done.signal() }
                }
            }
        }
        XCTAssertEqual(done.wait(timeout: .now() + 60), .success)
        XCTAssertEqual(counts.wrong.count, 0)
        let overflowed = pool.stats.reduce(0) { $0 + $1.overflowed }
        XCTAssertGreaterThanOrEqual(overflowed, UInt64(n - 4), "pushes past the deque's capacity stayed on it")
        XCTAssertEqual(pool.run { fib(pool, 16) }, 987)
        XCTAssertGreaterThan(pool.stats.reduce(0) { $0 + $1.overflowed }, overflowed, "no fork overflowed")
        try pool.shutdown()
    }

    func testPermanentEnginePoolRefusesShutdownAndRunsSubmissions() throws {
        // A permanent pool skips the submit/shutdown handshake, so it must never be
        // shut down: the engine refuses with EPERM and keeps running work.
        var cfg = spindle_config()
        spindle_config_init(&cfg)
        cfg.workers = 1
        cfg.permanent = true
        var raw: OpaquePointer?
        XCTAssertEqual(spindle_pool_create(&cfg, &raw), 0)
        let pool = try XCTUnwrap(raw)
        XCTAssertEqual(spindle_pool_shutdown(pool, SPINDLE_SHUTDOWN_DRAIN), EPERM)
        XCTAssertEqual(spindle_pool_destroy(pool, SPINDLE_SHUTDOWN_CANCEL), EPERM)
        let done = DispatchSemaphore(value: 0)
        let box = Unmanaged.passRetained(done)
        XCTAssertEqual(spindle_submit(pool, { ctx, _ in
            Unmanaged<DispatchSemaphore>.fromOpaque(ctx!).takeRetainedValue().signal()
        }, box.toOpaque()), 0)
        XCTAssertEqual(done.wait(timeout: .now() + 60), .success)
        // The pool is deliberately leaked: permanent means until the process exits.
        XCTAssertThrowsError(try ThreadPool.shared.shutdown(.drain))
    }

    func testOutsideSubmissionWakesTheWorkerOnTheSubmittersCPU() throws {
        // A pool with one worker pinned per CPU wakes, for a submission from outside,
        // the sleeping worker on the submitter's CPU (park.c, pick_sleeper_locked).
        let cpus = Int(spindle_usable_cpu_count())
        guard cpus >= 2 else { throw XCTSkip("needs two CPUs") }
        var config = ThreadPool.Configuration()
        config.pinning = .core
        config.spin = .microseconds(1)
        config.name = "wakecpu"
        let pool = try ThreadPool(configuration: config)
        defer { try? pool.shutdown() }
        // One worker pinned to each CPU, each taking work: not under a CPU limit of one
        // (one takes work) nor with SPINDLE_WORKERS setting another count.
        guard pool.workerCount == cpus, pool.activeWorkerCount == cpus else {
            throw XCTSkip("needs one worker taking work on each CPU")
        }
        let ranOn = Atomic<Int32>(-1)
        let done = DispatchSemaphore(value: 0)
        let mismatches = Mutex<[String]>([])
        let finished = DispatchSemaphore(value: 0)
        let rounds = Stress.count(20)
        // Run the submitter on each CPU in turn, pinned there.
        let submitter = Thread {
            for round in 0..<rounds {
                let cpu = Int32(round % 2)
                guard spindle_test_pin_self(cpu) == 0 else { mismatches.locked { $0.append("cannot pin to CPU \(cpu)") }; continue }
                // Every worker asleep: the wake chooses among the sleepers, and a worker
                // still starting or searching would take the task on its own CPU.
                guard eventually({ spindle_pool_parked(pool.raw) >= UInt32(pool.workerCount) }) else {
                    mismatches.locked { $0.append("round \(round): the workers never all parked") }
                    continue
                }
                try? pool.submit { ranOn.store(spindle_test_current_cpu(), ordering: .releasing); done.signal() }
                done.wait()
                let got = ranOn.load(ordering: .acquiring)
                if got != cpu { mismatches.locked { $0.append("round \(round): submitted on CPU \(cpu), ran on \(got)") } }
            }
            finished.signal()
        }
        submitter.start()
        finished.wait()
        XCTAssertEqual(mismatches.locked { $0 }, [])
    }

    func testAWorkerWokenOntoItsSubmittersCPUDoesNotSpinThere() throws {
        // park.c, G1: a worker that an outside thread woke on that thread's own CPU, and
        // that outranks it (lower nice: its yields would not hand the CPU back), searches
        // once and parks instead of spinning there. The spin is set to 1 s so that
        // spinning and not spinning are far apart. Two controls must spin: a submitter
        // on another CPU, and one on the worker's CPU at the pool's own nice.
        guard spindle_usable_cpu_count() >= 2 else { throw XCTSkip("needs two CPUs") }
        // Everything relative to this thread's nice, which raising never needs privilege
        // for; with room for a submitter 5 above it (a suite run at nice 15 or more
        // lowers it, which needs root).
        let base = Int32(min(threadNice(), 14))
        if Int(base) < threadNice() && getuid() != 0 { throw XCTSkip("run at nice \(threadNice()): no room above the pool") }
        var config = ThreadPool.Configuration(workers: 1)
        config.pinning = .core
        config.spin = .seconds(1)
        config.nice = base
        config.name = "guest"
        let pool = try ThreadPool(configuration: config)
        defer { try? pool.shutdown() }
        XCTAssertEqual(pool.effectiveNice, base)
        let workerCPU = pool.run { spindle_test_current_cpu() }
        let otherCPU: Int32 = workerCPU == 0 ? 1 : 0
        func parked() -> UInt64 { pool.stats[0].parked }
        func waitForPark(after count: UInt64, within seconds: Double) -> Bool {
            let deadline = Date().addingTimeInterval(seconds)
            while parked() <= count, Date() < deadline { usleep(1_000) }
            return parked() > count
        }
        XCTAssertTrue(waitForPark(after: 0, within: 60), "the worker parks when there is nothing to do")

        /// Submits one task from a new thread pinned to `cpu` at `nice` (never below
        /// `base`) and returns once the task has run.
        func submit(from cpu: Int32, nice: Int32) {
            let ran = DispatchSemaphore(value: 0), finished = DispatchSemaphore(value: 0)
            let submitter = Thread {
                XCTAssertEqual(spindle_test_pin_self(cpu), 0)
                XCTAssertEqual(setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0, nice), 0)
                try? pool.submit { ran.signal() }
                XCTAssertEqual(ran.wait(timeout: .now() + 60), .success)
                finished.signal()
            }
            submitter.start()
            finished.wait()
        }
        /// Submits as `submit` does; true if the worker then searched for (at least
        /// 300 ms of) its spin, false if it parked within that time.
        func spins(from cpu: Int32, nice: Int32) -> Bool {
            let before = parked()
            submit(from: cpu, nice: nice)
            let parkedEarly = waitForPark(after: before, within: 0.3)
            XCTAssertTrue(waitForPark(after: before, within: 60), "the worker parks in the end")
            return !parkedEarly
        }

        XCTAssertTrue(spins(from: otherCPU, nice: base + 5), "woken from another CPU, the worker searches for its whole spin")
        XCTAssertTrue(spins(from: workerCPU, nice: base), "woken at its own nice, the worker's yields hand the CPU back: it spins")
        XCTAssertFalse(spins(from: workerCPU, nice: base + 5), "woken on the CPU of a submitter it outranks, the worker parks at once")
    }

    func testABacklogWakesASleeperEvenWhileSomebodySearches() throws {
        // park.c, B1: "wake nobody while somebody searches" trusts the searcher to run.
        // A phantom searcher stands in for one the kernel keeps off the CPU; the only
        // worker sleeps. Below the backlog threshold nothing may wake it (which shows the
        // phantom holds it down); the submission that finds the threshold queued must.
        let ran = Counter()
        let context = Unmanaged.passRetained(ran)
        defer { context.release() } // last: the pool's drain may still run tasks
        var cfg = spindle_config()
        spindle_config_init(&cfg)
        cfg.workers = 1
        cfg.spin_ns = 1_000
        var raw: OpaquePointer?
        XCTAssertEqual(spindle_pool_create(&cfg, &raw), 0)
        let pool = try XCTUnwrap(raw)
        defer { XCTAssertEqual(spindle_pool_destroy(pool, SPINDLE_SHUTDOWN_DRAIN), 0) }
        // Wait until the worker has parked (and so no longer searches itself).
        var stats = spindle_worker_stats()
        let parkDeadline = Date().addingTimeInterval(10)
        while spindle_pool_stats(pool, &stats, 1) == 1, stats.parked == 0, Date() < parkDeadline { usleep(1_000) }
        XCTAssertGreaterThan(stats.parked, 0, "the worker parks when there is nothing to do")
        spindle_test_add_phantom_searchers(pool, 1)
        defer { spindle_test_add_phantom_searchers(pool, -1) }
        func submitOne() {
            XCTAssertEqual(spindle_submit(pool, { ctx, _ in
                Unmanaged<Counter>.fromOpaque(ctx!).takeUnretainedValue().increment()
            }, context.toOpaque()), 0)
        }
        let threshold = Int(spindle_test_backlog_wake())
        for _ in 0..<threshold { submitOne() } // the last one finds threshold - 1 queued
        usleep(50_000)
        XCTAssertEqual(ran.value, 0, "nothing wakes the sleeper below the threshold")
        submitOne() // finds `threshold` queued
        let deadline = Date().addingTimeInterval(10)
        while ran.value < threshold + 1, Date() < deadline { usleep(1_000) }
        XCTAssertEqual(ran.value, threshold + 1, "the backlog woke the sleeper, which ran all of it")
    }

    /// The scheduler slice a worker runs with, read from inside a task
    /// (`se.slice` in /proc/thread-self/sched, in ns), or nil where the kernel has none.
    private func sliceSeenByATask(_ pool: ThreadPool) -> Int? {
        pool.run { () -> Int? in
            guard let text = try? String(contentsOfFile: "/proc/thread-self/sched", encoding: .utf8),
                  let line = text.split(separator: "\n").first(where: { $0.hasPrefix("se.slice") }),
                  let value = line.split(separator: ":").last?.trimmingCharacters(in: .whitespaces)
            else { return nil }
            return Int(value)
        }
    }

    func testWorkersAskForTheConfiguredTimeSlice() throws {
        let normal = try ThreadPool(workers: 1)
        defer { try? normal.shutdown() }
        guard let slice = sliceSeenByATask(normal), normal.timeSliceError == nil else {
            throw XCTSkip("this kernel has no per-thread slice (error \(normal.timeSliceError ?? 0))")
        }
        XCTAssertEqual(slice, 100_000, "a normal-policy pool asks for 100 µs by default")
        XCTAssertEqual(normal.requestedTimeSlice, .microseconds(100))

        var c = ThreadPool.Configuration(workers: 1)
        c.timeSlice = .microseconds(500)
        let custom = try ThreadPool(configuration: c)
        defer { try? custom.shutdown() }
        XCTAssertEqual(sliceSeenByATask(custom), 500_000)
        XCTAssertEqual(custom.requestedTimeSlice, .microseconds(500))

        c.timeSlice = .zero
        let kernel = try ThreadPool(configuration: c)
        defer { try? kernel.shutdown() }
        XCTAssertNotEqual(sliceSeenByATask(kernel), 100_000, "Duration.zero keeps the kernel's slice")
        XCTAssertNil(kernel.requestedTimeSlice)

        var b = ThreadPool.Configuration(workers: 1)
        b.policy = .batch
        let batch = try ThreadPool(configuration: b)
        defer { try? batch.shutdown() }
        XCTAssertNotEqual(sliceSeenByATask(batch), 100_000, "batch pools keep the kernel's slice")
        XCTAssertNil(batch.requestedTimeSlice)

        // A regular worker gets its policy from the pool's creator (worker.c, W7), which
        // resets the slice: the creator asks for it again.
        b.timeSlice = .microseconds(500)
        let slicedBatch = try ThreadPool(configuration: b)
        defer { try? slicedBatch.shutdown() }
        XCTAssertEqual(sliceSeenByATask(slicedBatch), 500_000)
        XCTAssertEqual(slicedBatch.run { currentThreadPolicy() }, 3, "SCHED_BATCH")
        XCTAssertEqual(Int(slicedBatch.effectivePolicy), 3, "SCHED_BATCH")

        c.timeSlice = .seconds(10)
        XCTAssertThrowsError(try ThreadPool(configuration: c))
    }
}


/// On a fresh thread: `prepare` it, create a pool from `configuration` there, and return
/// what `read` sees on that thread and on one of the pool's workers (nil: not reached).
func seenByCreatorAndWorker<T: Sendable>(_ configuration: ThreadPool.Configuration,
                                         prepare: @escaping @Sendable () -> Bool,
                                         _ read: @escaping @Sendable () -> T) -> (creator: T?, worker: T?) {
    let seen = Mutex<(creator: T?, worker: T?)>((nil, nil))
    let done = DispatchSemaphore(value: 0)
    let t = Thread {
        defer { done.signal() }
        guard prepare() else { return }
        let mine = read()
        seen.locked { $0.creator = mine }
        guard let pool = try? ThreadPool(configuration: configuration) else { return }
        let ran = DispatchSemaphore(value: 0)
        try? pool.submit {
            let theirs = read()
            seen.locked { $0.worker = theirs }
            ran.signal()
        }
        _ = ran.wait(timeout: .now() + 10)
    }
    t.start()
    _ = done.wait(timeout: .now() + 20)
    return seen.locked { $0 }
}
