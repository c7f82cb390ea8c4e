import CSpindle
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
        XCTAssertEqual(pool.workerCount, n)
        XCTAssertEqual(try ThreadPool(workers: 3).workerCount, 3)
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

    func testDeepRecursiveForkJoin() throws {
        let pool = try ThreadPool()
        XCTAssertEqual(pool.run { fib(pool, Stress.isTSan ? 18 : 24) }, Stress.isTSan ? 2584 : 46368)
        // From outside the pool too (forks go through the injector).
        XCTAssertEqual(fib(pool, 15), 610)
    }

    func testJoinWaitsForTheOtherHalfWhenTheFirstThrows() throws {
        struct Boom: Error {}
        let pool = try ThreadPool(workers: 2)
        let finished = Atomic<Bool>(false)
        XCTAssertThrowsError(try pool.run {
            Result { try pool.join({ () throws -> Int in throw Boom() }, { () -> Int in
                usleep(20_000)
                finished.store(true, ordering: .releasing)
                return 1
            }) }
        }.get())
        XCTAssertTrue(finished.load(ordering: .acquiring), "join returned before its second half finished")
    }

    /// Join's halves reach the engine as borrowed closure words (no retain of their
    /// contexts): results that own memory must come back intact whether a half ran
    /// inline or on a thief, and what the closures captured must be released exactly
    /// once, after the join.
    func testJoinReturnsOwnedResultsAndReleasesCaptures() throws {
        let pool = try ThreadPool(workers: 2)
        @Sendable func sort(_ xs: ArraySlice<Int>) -> [Int] {
            if xs.count <= 4 { return xs.sorted() }
            let mid = xs.startIndex + xs.count / 2
            let (l, r) = pool.join({ sort(xs[..<mid]) }, { sort(xs[mid...]) })
            var out: [Int] = []
            out.reserveCapacity(xs.count)
            var i = 0, j = 0
            while i < l.count && j < r.count {
                if l[i] <= r[j] { out.append(l[i]); i += 1 } else { out.append(r[j]); j += 1 }
            }
            out += l[i...]
            out += r[j...]
            return out
        }
        let input = (0..<Stress.count(50_000)).map { ($0 &* 7919) % 10_007 }
        for _ in 0..<4 {
            XCTAssertEqual(pool.run { sort(input[...]) }, input.sorted())
        }

        let counter = ReleaseCounter()
        let rounds = Stress.count(2_000)
        pool.run {
            for _ in 0..<rounds {
                let left = Token(counter), right = Token(counter)
                let (a, b) = pool.join({ [left] in String(describing: ObjectIdentifier(left)) },
                                       { [right] in [ObjectIdentifier(right)] })
                XCTAssertFalse(a.isEmpty)
                XCTAssertEqual(b.count, 1)
            }
        }
        XCTAssertEqual(counter.released.load(ordering: .relaxed), 2 * rounds)
    }

    func testJoinThrowsTheFirstHalfsTypedError() throws {
        enum Parse: Error, Equatable { case bad(Int) }
        let pool = try ThreadPool(workers: 2)
        // Typed throws: the error keeps its static type through join.
        let result: Result<(Int, Int), Parse> = pool.run {
            Result { () throws(Parse) -> (Int, Int) in
                try pool.join({ () throws(Parse) -> Int in throw .bad(7) }, { 1 })
            }
        }
        XCTAssertEqual(result.map { $0.0 }, .failure(.bad(7)))
        // A non-throwing first half needs no `try`.
        let (x, y) = pool.join({ 2 }, { 3 })
        XCTAssertEqual(x + y, 5)
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
        XCTAssertEqual(done.wait(timeout: .now() + 10), .success)
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
                usleep(5_000) // every worker asleep
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
        // Everything relative to this thread's nice, which raising never needs privilege for.
        let base = getpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0)
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
        XCTAssertTrue(waitForPark(after: 0, within: 10), "the worker parks when there is nothing to do")

        /// Submits one task from a new thread pinned to `cpu` at `nice` (never below
        /// `base`) and returns once the task has run.
        func submit(from cpu: Int32, nice: Int32) {
            let ran = DispatchSemaphore(value: 0), finished = DispatchSemaphore(value: 0)
            let submitter = Thread {
                XCTAssertEqual(spindle_test_pin_self(cpu), 0)
                XCTAssertEqual(setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0, nice), 0)
                try? pool.submit { ran.signal() }
                XCTAssertEqual(ran.wait(timeout: .now() + 10), .success)
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
            XCTAssertTrue(waitForPark(after: before, within: 10), "the worker parks in the end")
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

        c.timeSlice = .seconds(10)
        XCTAssertThrowsError(try ThreadPool(configuration: c))
    }

    func testConcurrentPerformCoversEveryIndexOnce() throws {
        let pool = try ThreadPool()
        for n in [0, 1, 7, 1000, Stress.count(300_000)] {
            let counts = RunCounts(max(n, 1))
            pool.concurrentPerform(iterations: n) { counts.hit($0) }
            if n > 0 { XCTAssertEqual(counts.wrong.count, 0, "n = \(n)") }
        }
        // From inside a worker, nested in fork-join.
        let counts = RunCounts(10_000)
        pool.run { pool.concurrentPerform(iterations: 10_000, grain: 7) { counts.hit($0) } }
        XCTAssertEqual(counts.wrong.count, 0)
    }

    func testShutdownDrainRunsEverythingQueued() throws {
        let pool = try ThreadPool(workers: 2)
        let n = Stress.count(100_000)
        let ran = Atomic<Int>(0)
        for _ in 0..<n { try pool.submit { ran.add(1, ordering: .relaxed) } }
        try pool.shutdown(.drain)
        XCTAssertEqual(ran.load(ordering: .relaxed), n)
        XCTAssertThrowsError(try pool.submit {}) { XCTAssertEqual($0 as? ThreadPool.Error, .shutDown) }
    }

    func testShutdownCancelReleasesWhatHasNotStarted() throws {
        let pool = try ThreadPool(workers: 1)
        let gate = DispatchSemaphore(value: 0)
        let started = DispatchSemaphore(value: 0)
        let ran = Atomic<Int>(0)
        let counter = ReleaseCounter()
        try pool.submit { started.signal(); gate.wait() }
        started.wait()
        let n = 1000
        for _ in 0..<n {
            let token = Token(counter)
            try pool.submit { _ = token; ran.add(1, ordering: .relaxed) }
        }
        let shutdownReturned = Atomic<Bool>(false)
        let t = Thread {
            try? pool.shutdown(.cancel)
            shutdownReturned.store(true, ordering: .releasing)
        }
        t.start()
        while !pool.isShuttingDown { usleep(100) }
        XCTAssertThrowsError(try pool.submit {}) { XCTAssertEqual($0 as? ThreadPool.Error, .shutDown) }
        gate.signal()
        while !shutdownReturned.load(ordering: .acquiring) { usleep(100) }
        XCTAssertEqual(ran.load(ordering: .relaxed), 0, "cancelled closures must not run")
        XCTAssertEqual(counter.released.load(ordering: .relaxed), n, "every cancelled closure is released")
    }

    func testShutdownFromOwnWorkerIsAnError() throws {
        let pool = try ThreadPool(workers: 1)
        let result = pool.run { () -> String in
            do { try pool.shutdown(); return "no error" } catch { return "\(error)" }
        }
        XCTAssertEqual(result, "\(ThreadPool.Error.shutdownFromOwnWorker)")
        XCTAssertFalse(pool.isShuttingDown)
    }

    func testSubmitsRacingShutdownAreRunOrRefusedNeverLost() throws {
        for _ in 0..<Stress.count(20) {
            let pool = try ThreadPool(workers: 2)
            let accepted = Atomic<Int>(0), ran = Atomic<Int>(0)
            let go = Atomic<Bool>(false)
            let t = Thread {
                while !go.load(ordering: .acquiring) {}
                for _ in 0..<5_000 {
                    do { try pool.submit { ran.add(1, ordering: .relaxed) }; accepted.add(1, ordering: .relaxed) } catch {}
                }
            }
            t.start()
            go.store(true, ordering: .releasing)
            usleep(UInt32.random(in: 0...300))
            try pool.shutdown(.drain)
            // Wait for the submitting thread: it counts an accepted submission only after
            // submit returns, so until it is done `ran` may be ahead of `accepted`.
            while !t.isFinished { usleep(100) }
            // Every accepted task has run once shutdown(.drain) returned; the ones the
            // submitter got through afterwards were refused.
            XCTAssertEqual(accepted.load(ordering: .acquiring), ran.load(ordering: .acquiring))
        }
    }

    func testCreateDestroyThousandTimesLeaksNoThreads() throws {
        // Count only this test's workers (named "leakchk<N>"): other threads of the
        // process, Dispatch's among them, come and go on their own.
        var c = ThreadPool.Configuration(workers: 2)
        c.name = "leakchk"
        func ours() -> Int { threadNames().filter { $0.hasPrefix("leakchk") }.count }
        // Warm up allocator arenas, then measure growth over many cycles.
        for _ in 0..<20 { _ = try ThreadPool(configuration: c) }
        let rss0 = residentBytes()
        for i in 0..<Stress.count(1000) {
            let pool = try ThreadPool(configuration: c)
            XCTAssertEqual(pool.workerCount, 2)
            try pool.submit {}
            if i % 2 == 0 { try pool.shutdown(.cancel) }
        }
        // A pool dropped with work still queued is drained and freed by a helper thread
        // (deinit does not wait for its work): its workers exit shortly after.
        XCTAssertTrue(eventually(within: 20) { ours() == 0 }, "worker threads outlived their pools (\(ours()) left)")
        let grown = residentBytes() - rss0
        // AddressSanitizer keeps freed memory in quarantine: resident size says nothing.
        if !Stress.isASan {
            XCTAssertLessThan(grown, 8 << 20, "resident memory grew \(grown) bytes over the cycles")
        }
        // The check can see workers: one live pool shows up.
        let live = try ThreadPool(configuration: c)
        XCTAssertEqual(ours(), live.workerCount)
    }

    func testIdlePoolBurnsNoCPU() throws {
        let pool = try ThreadPool()
        // Warm up: make every worker run and go back to sleep.
        for _ in 0..<10_000 { try pool.submit {} }
        usleep(200_000)
        let before = pool.cpuTime
        sleep(1)
        let used = pool.cpuTime - before
        XCTAssertLessThan(used, .milliseconds(1), "an idle pool used \(used) of CPU in one second")
    }

    func testPoolReleasedInsideItsOwnTaskDoesNotDeadlock() throws {
        let done = DispatchSemaphore(value: 0)
        do {
            let pool = try ThreadPool(workers: 1)
            let box = UncheckedBox(pool)
            try pool.submit {
                _ = box
                done.signal()
            }
        }
        // The last reference may be dropped on the worker; the pool must still free
        // itself (on a helper thread) rather than hang or crash.
        XCTAssertEqual(done.wait(timeout: .now() + 10), .success)
    }

    func testProcessWidePoolsCannotBeShutDown() {
        XCTAssertThrowsError(try ThreadPool.shared.shutdown()) { XCTAssertEqual($0 as? ThreadPool.Error, .processWidePool) }
        XCTAssertThrowsError(try ThreadPool.forQualityOfService(.utility).shutdown(.cancel)) {
            XCTAssertEqual($0 as? ThreadPool.Error, .processWidePool)
        }
        XCTAssertFalse(ThreadPool.shared.isShuttingDown)
    }

    func testInvalidConfigurationIsReported() {
        XCTAssertThrowsError(try ThreadPool(workers: 0))
        var c = ThreadPool.Configuration()
        c.nice = 40
        XCTAssertThrowsError(try ThreadPool(configuration: c))
    }

    /// A thread starts with its creator's policy and nice, and an unprivileged one can
    /// never lower its nice or leave SCHED_IDLE. Workers are started by the process's
    /// spawner (spawn.c), so a pool created from inside SCHED_IDLE, nice +10 work starts
    /// at the process's own priority and moves only to what it asks for.
    func testAPoolCreatedInsideDemotedWorkStartsAtTheProcesssPriority() throws {
        let processPolicy = Int(sched_getscheduler(getpid()))
        let processNice = Int(getpriority(__priority_which_t(PRIO_PROCESS.rawValue), id_t(getpid())))
        var low = ThreadPool.Configuration(workers: 1)
        low.policy = .idle
        low.nice = 10
        let demoted = try ThreadPool(configuration: low)
        let seen = Mutex<[String: [Int]]>([:])
        let done = DispatchSemaphore(value: 0)
        try demoted.submit {
            seen.locked { $0["creator"] = [currentThreadPolicy(), currentThreadNice()] }
            func observe(_ name: String, _ configure: (inout ThreadPool.Configuration) -> Void) {
                var c = ThreadPool.Configuration(workers: 1)
                configure(&c)
                guard let pool = try? ThreadPool(configuration: c) else { return }
                let ran = DispatchSemaphore(value: 0)
                try? pool.submit {
                    let v = [currentThreadPolicy(), currentThreadNice()]
                    seen.locked { $0[name] = v }
                    ran.signal()
                }
                _ = ran.wait(timeout: .now() + 10)
                seen.locked {
                    $0[name + ".reported"] = [Int(pool.effectivePolicy), Int(pool.effectiveNice),
                                              Int(pool.policyError ?? 0), Int(pool.niceError ?? 0)]
                }
            }
            observe("default") { _ in }
            observe("batch+2") { $0.policy = .batch; $0.nice = 2 }
            done.signal()
        }
        XCTAssertEqual(done.wait(timeout: .now() + 20), .success)
        let s = seen.locked { $0 }
        XCTAssertEqual(s["creator"], [5, 10], "the creating worker runs under SCHED_IDLE at +10")
        XCTAssertEqual(s["default"], [processPolicy, processNice], "inherited the creator's priority")
        XCTAssertEqual(s["default.reported"], [processPolicy, processNice, 0, 0])
        XCTAssertEqual(s["batch+2"], [3, 2])
        XCTAssertEqual(s["batch+2.reported"], [3, 2, 0, 0])
    }

    /// A pool created from inside a pinned worker (a userInteractive one is pinned to a
    /// single CPU) is planned for the CPUs its creator's pool was planned for, not for
    /// the one CPU that worker may use: otherwise the default class's pool, first used
    /// by an interactive operation, had one worker.
    func testAPoolCreatedInsideAPinnedWorkerSpansTheProcesssCPUs() throws {
        var core = ThreadPool.Configuration()
        core.pinning = .core
        let pinned = try ThreadPool(configuration: core)
        let seen = Mutex<[String]>([])
        let done = DispatchSemaphore(value: 0)
        try pinned.submit {
            let made = (try? ThreadPool())?.workerCount ?? -1
            let cpus = (try? Topology.load())?.nodes.reduce(0) { $0 + $1.cpus.count } ?? -1
            seen.locked { $0 = [currentThreadAllowedCPUs(), "workers=\(made)", "cpus=\(cpus)"] }
            done.signal()
        }
        XCTAssertEqual(done.wait(timeout: .now() + 20), .success)
        let usable = Int(spindle_usable_cpu_count())
        let s = seen.locked { $0 }
        XCTAssertEqual(s.count, 3)
        if usable > 1 { XCTAssertFalse(s.first?.contains("-") ?? true, "the creating worker is pinned to one CPU: \(s)") }
        XCTAssertEqual(Array(s.dropFirst()), ["workers=\(usable)", "cpus=\(usable)"])
    }

    /// Unpinned workers still take their creator's CPU mask, as threads it started would.
    func testUnpinnedWorkersKeepTheirCreatorsCPUMask() throws {
        // The spawner, started from an unrestricted thread, must pass the mask on.
        _ = try ThreadPool(configuration: .init(workers: 1))
        var c = ThreadPool.Configuration(workers: 1)
        c.pinning = .none
        let seen = seenByCreatorAndWorker(c, prepare: { spindle_test_pin_self(0) == 0 }) { currentThreadAllowedCPUs() }
        XCTAssertEqual(seen.creator, "0")
        XCTAssertEqual(seen.worker, "0", "an unpinned worker's CPU mask")
    }

    /// Workers take their creator's signal mask, as threads it started would: a service
    /// that blocks SIGTERM everywhere but in a sigwait() thread must not have it
    /// delivered to a worker. And the spawner itself blocks every signal.
    func testWorkersTakeTheirCreatorsSignalMaskAndTheSpawnerBlocksEverySignal() throws {
        _ = try ThreadPool(configuration: .init(workers: 1)) // the spawner exists
        let usr2: UInt64 = 1 << (UInt64(SIGUSR2) - 1)
        let seen = seenByCreatorAndWorker(.init(workers: 1), prepare: {
            var set = sigset_t()
            sigemptyset(&set)
            sigaddset(&set, SIGUSR2)
            return pthread_sigmask(SIG_BLOCK, &set, nil) == 0
        }) { currentThreadBlockedSignals() }
        XCTAssertEqual(seen.creator.map { $0 & usr2 }, usr2)
        XCTAssertEqual(seen.worker, seen.creator, "a worker's blocked signals")
        // The spawner: the one thread of this process named spindle-spawn.
        let spawner = threads().filter { $0.name == "spindle-spawn" }.map(\.tid)
        XCTAssertEqual(spawner.count, 1, "one spawner thread")
        if let tid = spawner.first {
            let blocked = UInt64(threadStatus("SigBlk", of: "/proc/self/task/\(tid)/status"), radix: 16) ?? 0
            for sig in [SIGHUP, SIGINT, SIGTERM, SIGUSR1, SIGUSR2, SIGCHLD, SIGPIPE] {
                XCTAssertNotEqual(blocked & (1 << (UInt64(sig) - 1)), 0, "the spawner does not block signal \(sig)")
            }
        }
    }

    /// Every pool's workers come from the one spawner: pools created at once from many
    /// threads, and from inside each other's work, must all start, run and stop.
    func testPoolsCreatedConcurrentlyAllStart() throws {
        let rounds = Stress.count(25)
        let ran = Atomic<Int>(0)
        let failed = Atomic<Int>(0)
        onThreads(6) { _ in
            for _ in 0..<rounds {
                guard let outer = try? ThreadPool(configuration: .init(workers: 2)) else { failed.add(1, ordering: .relaxed); continue }
                let done = DispatchSemaphore(value: 0)
                try? outer.submit {
                    // A pool created from inside work, while other threads create theirs.
                    if let inner = try? ThreadPool(configuration: .init(workers: 1)) {
                        let innerDone = DispatchSemaphore(value: 0)
                        try? inner.submit { ran.add(1, ordering: .relaxed); innerDone.signal() }
                        if innerDone.wait(timeout: .now() + 10) != .success { failed.add(1, ordering: .relaxed) }
                        try? inner.shutdown(.drain)
                    } else {
                        failed.add(1, ordering: .relaxed)
                    }
                    done.signal()
                }
                if done.wait(timeout: .now() + 20) != .success { failed.add(1, ordering: .relaxed) }
                try? outer.shutdown(.drain)
            }
        }
        XCTAssertEqual(failed.load(ordering: .relaxed), 0)
        XCTAssertEqual(ran.load(ordering: .relaxed), 6 * rounds)
    }

    /// fork() copies only the calling thread: the child has no spawner, and must start
    /// one when it creates a pool (spawn.c's atfork handler). Without that, the child's
    /// pool creation waits forever.
    func testAPoolCreatedInAForkedChildStartsItsWorkers() throws {
        // ThreadSanitizer kills a child that starts threads after a multi-threaded fork
        // (die_after_fork).
        if Stress.isTSan { throw XCTSkip("ThreadSanitizer does not allow threads after fork") }
        _ = try ThreadPool(configuration: .init(workers: 1)) // the parent's spawner exists
        XCTAssertEqual(spindle_test_pool_in_forked_child(10_000), 0)
    }

    func testRefusedNegativeNiceFallsBackAndIsReported() throws {
        var c = ThreadPool.Configuration(workers: 1)
        c.nice = 5
        let pool = try ThreadPool(configuration: c)
        XCTAssertEqual(pool.effectiveNice, 5)
        XCTAssertNil(pool.niceError)
        if getuid() != 0 {
            c.nice = -4
            let p2 = try ThreadPool(configuration: c)
            XCTAssertEqual(p2.niceError, EACCES)
            XCTAssertEqual(p2.effectiveNice, Int32(getpriority(__priority_which_t(PRIO_PROCESS.rawValue), id_t(getpid()))),
                           "refused: workers keep the process's nice")
        }
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
