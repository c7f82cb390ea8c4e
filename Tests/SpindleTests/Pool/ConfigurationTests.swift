import CSpindle
import CSpindleTesting
import Foundation
import Synchronization
import XCTest

@testable import Spindle

/// Out-of-range configuration is refused with `invalidConfiguration`, naming the field;
/// nothing in the checks themselves may trap.
final class ConfigurationTests: XCTestCase {
    func expectInvalid(_ field: String, _ change: (inout ThreadPool.Configuration) -> Void,
                       file: StaticString = #filePath, line: UInt = #line) {
        var config = ThreadPool.Configuration(workers: 1)
        change(&config)
        XCTAssertThrowsError(try ThreadPool(configuration: config), file: file, line: line) { error in
            guard case ThreadPool.Error.invalidConfiguration(let why) = error else {
                return XCTFail("\(error)", file: file, line: line)
            }
            XCTAssertTrue(why.contains(field), why, file: file, line: line)
        }
    }

    func testOversizedAndNegativeDurationsAreRefusedNotTrapped() {
        let huge = Duration.seconds(Int64.max / 2)
        let negative = Duration.seconds(-Int64.max / 2)
        expectInvalid("spin") { $0.spin = huge }
        expectInvalid("spin") { $0.spin = negative }
        expectInvalid("timeSlice") { $0.timeSlice = huge }
        expectInvalid("timeSlice") { $0.timeSlice = negative }
        expectInvalid("spareIdleTimeout") { $0.spareIdleTimeout = negative }
        expectInvalid("spareIdleTimeout") { $0.spareIdleTimeout = .zero }
    }

    func testWholeNanosecondsSaturates() {
        XCTAssertEqual(Duration.seconds(Int64.max / 2).wholeNanoseconds, Int64.max)
        XCTAssertEqual(Duration.seconds(-Int64.max / 2).wholeNanoseconds, Int64.min)
        XCTAssertEqual(Duration.milliseconds(1500).wholeNanoseconds, 1_500_000_000)
    }

    func testSpareWorkerLimitsAreChecked() {
        expectInvalid("maxSpareWorkers") { $0.maxSpareWorkers = -1 }
        expectInvalid("maxSpareWorkers") { $0.maxSpareWorkers = 5000 }
    }
}

/// Small hardening: names and node lists.
final class ConfigurationEdgeTests: XCTestCase {
    func testThreadNamesAreNeverCutInsideAUTF8Character() throws {
        for prefix in ["ñññññññññññ", "日本語のスレッド名", "aé"] {
            var config = ThreadPool.Configuration(workers: 12)
            config.name = prefix
            let pool = try ThreadPool(configuration: config)
            defer { try? pool.shutdown() }
            // threads() decodes each name as UTF-8; a cut character would not decode.
            let first = String(prefix.prefix(1))
            let named = threadNames().filter { $0.hasPrefix(first) }
            XCTAssertEqual(named.count, 12, "\(prefix): \(named)")
            for name in named {
                XCTAssertLessThanOrEqual(name.utf8.count, 15, name)
                XCTAssertTrue(name.last!.isNumber, "the index is kept: \(name)")
            }
        }
    }

    func testAnEmptyNodeListIsRefused() {
        var config = ThreadPool.Configuration(workers: 1)
        config.nodes = []
        XCTAssertThrowsError(try ThreadPool(configuration: config)) { error in
            guard case ThreadPool.Error.invalidConfiguration(let why) = error else { return XCTFail("\(error)") }
            XCTAssertTrue(why.contains("nodes"), why)
        }
    }

    func testAnUnknownNodeIsAThreadPoolError() {
        var config = ThreadPool.Configuration(workers: 1)
        config.nodes = [4095]
        XCTAssertThrowsError(try ThreadPool(configuration: config)) { error in
            guard case ThreadPool.Error.invalidConfiguration(let why) = error else {
                return XCTFail("expected ThreadPool.Error.invalidConfiguration, got \(error)")
            }
            XCTAssertTrue(why.contains("4095"), why)
        }
    }
}

/// Whose CPUs a pool runs on.
final class PlacementTests: XCTestCase {
    /// A burst of forked work can find the kernel's placement with every worker on one
    /// CPU: the woken worker lands beside the one whose push woke it while the other
    /// CPUs look busy. Found there, it moves to a CPU where no worker of its pool runs
    /// (park.c, G2), and the burst runs in parallel.
    func testAWorkerWokenOntoItsPushersCPUMovesToAFreeOne() throws {
        // The CPUs this process may use (its affinity: a container's cpuset, taskset),
        // not the machine's online count.
        let usable = Int(spindle_usable_cpu_count())
        try XCTSkipIf(usable < 2, "needs two CPUs")
        let pool = try ThreadPool(workers: 2)
        defer { try? pool.shutdown() }
        // The move is Spindle's; where the thread then stays is the kernel's, which may
        // now and then move it back before the half starts. So every burst must make
        // the move, and one of three must run on two CPUs.
        var parallel = false
        for burst in 1...3 where !parallel {
            // Parked, then confined to CPU 0: whoever wakes them, they wake there.
            XCTAssertTrue(eventually(within: 5, { spindle_pool_parked(pool.raw) == 2 }))
            XCTAssertEqual(spindle_test_confine_workers(pool.raw, 0), 0)
            let cpus = Mutex<Set<Int32>>([])
            let started = Atomic<Int>(0)
            let half: @Sendable () -> Void = {
                cpus.locked { _ = $0.insert(spindle_test_current_cpu()) }
                started.add(1, ordering: .relaxed)
                // Each half keeps its worker until the other half has started, however
                // slow the machine (up to ten seconds), so that the joining worker cannot
                // run both itself. Busy, not asleep: the monitor must not take either
                // worker for blocked.
                let end = DispatchTime.now().uptimeNanoseconds + 10_000_000_000
                while started.load(ordering: .relaxed) < 2 && DispatchTime.now().uptimeNanoseconds < end {}
            }
            pool.run { _ = pool.join(half, half) }
            _ = spindle_test_confine_workers(pool.raw, -1)
            XCTAssertEqual(spindle_test_pool_spreads(pool.raw), UInt32(burst), "burst \(burst) made no move")
            parallel = cpus.locked { $0 }.count == 2
            usleep(20_000) // a pool moves a worker at most once per 10 ms
        }
        XCTAssertTrue(parallel, "both halves ran on one CPU in each of three bursts")
    }

    /// An event-loop thread pinned to one CPU that touches a process-wide pool first
    /// must not leave it with one worker on that CPU.
    func testAProcessWidePoolCreatedByAPinnedThreadUsesTheProcesssCPUs() throws {
        // The CPUs this process may use (its affinity: a container's cpuset, taskset),
        // not the machine's online count.
        let usable = Int(spindle_usable_cpu_count())
        try XCTSkipIf(usable < 2, "needs two CPUs")
        let made = Mutex<(workers: Int, pins: Int32)?>(nil)
        let t = Thread {
            let pinned = spindle_test_pin_self(0)
            var config = ThreadPool.Configuration()
            config.name = "spindle-pw"
            let pool = try? ThreadPool(configuration: config, processWide: true)
            // Process-wide pools live as long as the process: keep it.
            if let pool { _ = Unmanaged.passRetained(pool) }
            made.locked { $0 = (pool?.workerCount ?? -1, pinned) }
        }
        t.start()
        XCTAssertTrue(eventually { made.locked { $0 } != nil })
        let result = try XCTUnwrap(made.locked { $0 })
        XCTAssertEqual(result.pins, 0, "could not pin the test thread")
        XCTAssertEqual(result.workers, usable, "sized by the pinned creator, not the process")
    }

    func testACustomPoolCanBeGivenItsCPUs() throws {
        var config = ThreadPool.Configuration()
        config.cpus = [0]
        config.pinning = .core
        let pool = try ThreadPool(configuration: config)
        defer { try? pool.shutdown() }
        XCTAssertEqual(pool.workerCount, 1)
        XCTAssertEqual(pool.run { spindle_test_current_cpu() }, 0)

        var none = ThreadPool.Configuration()
        none.cpus = []
        XCTAssertThrowsError(try ThreadPool(configuration: none))
        var offline = ThreadPool.Configuration()
        offline.cpus = [8000]
        XCTAssertThrowsError(try ThreadPool(configuration: offline))
    }
}

/// What a pool says when it could not do what it was asked.
final class ReportTests: XCTestCase {
    func testPinningAskedOfAnUnreadableTopologyIsReported() throws {
        setenv("SPINDLE_SYSFS_ROOT", "/no/such/sysfs/tree", 1)
        defer { unsetenv("SPINDLE_SYSFS_ROOT") }
        var config = ThreadPool.Configuration(workers: 2)
        config.pinning = .core
        let pool = try ThreadPool(configuration: config)
        defer { try? pool.shutdown() }
        XCTAssertEqual(pool.pinningError, ENOENT, "the workers are unpinned, and the pool should say why")
        var unpinned = ThreadPool.Configuration(workers: 2)
        unpinned.pinning = .none
        let quiet = try ThreadPool(configuration: unpinned)
        defer { try? quiet.shutdown() }
        XCTAssertNil(quiet.pinningError, "no pinning was asked for")
    }

    /// Under a real-time policy (the process started with `chrt -f`), workers have no time
    /// slice to ask for: nothing is requested and nothing reported as refused.
    func testARealTimeProcessAsksForNoSliceAndReportsNoError() throws {
        if ProcessInfo.processInfo.environment["SPINDLE_SLICE_PROBE"] != nil {
            let pool = try ThreadPool(workers: 1)
            let requested = pool.requestedTimeSlice.map { "\($0)" } ?? "nil"
            print("SLICE requested=\(requested) error=\(pool.timeSliceError ?? 0)")
            try pool.shutdown()
            return
        }
        guard getuid() == 0 else { throw XCTSkip("needs root for a real-time policy") }
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/chrt") else { throw XCTSkip("no chrt") }
        let (status, text) = try runChild(
            "/usr/bin/chrt", ["-f", "1", CommandLine.arguments[0],
                              "SpindleTests.ReportTests/testARealTimeProcessAsksForNoSliceAndReportsNoError"],
            environment: ["SPINDLE_SLICE_PROBE": "1", "PATH": "/usr/bin:/bin", "HOME": "/tmp"])
        // Root may still be refused a real-time policy: in a control group given no
        // real-time runtime (cgroup v1's cpu.rt_runtime_us), as a container's is.
        if status != 0 && text.contains("chrt: failed to set") { throw XCTSkip("a real-time policy was refused here: \(text)") }
        XCTAssertEqual(status, 0, text)
        XCTAssertTrue(text.contains("SLICE requested=nil error=0"), text)
    }
}

/// Process-wide pools under a thread limit degrade instead of stopping the process.
final class ThreadLimitTests: XCTestCase {
    override func tearDown() { spindle_test_limit_threads(-1) }

    func testAProcessWidePoolRunsWithTheThreadsTheSystemAllows() throws {
        var config = ThreadPool.Configuration(workers: 4)
        config.name = "spindle-lim"
        spindle_test_limit_threads(1)
        let pool = try XCTUnwrap(QoSPools.makeProcessWide(config, label: "test"))
        spindle_test_limit_threads(-1)
        _ = Unmanaged.passRetained(pool) // process-wide: lives as long as the process
        XCTAssertEqual(pool.workerCount, 1)
        XCTAssertEqual(pool.run { 42 }, 42)
        let ran = Counter()
        for _ in 0..<100 { try pool.submit { ran.increment() } }
        XCTAssertTrue(eventually { ran.value == 100 })
    }

    /// A process the system gives no worker thread at all still runs its work: the
    /// spawner, a thread Spindle already has, becomes a process-wide pool's only worker
    /// (spawn.c, SP1), and the classes that get no thread share it. Run in a child
    /// process, whose process-wide pools are made under the limit.
    func testAProcessGivenNoWorkerThreadStillRunsEveryKindOfWork() throws {
        if let probe = ProcessInfo.processInfo.environment["SPINDLE_STARVED_PROBE"] {
            // Every worker thread refused from now on: by the engine's test knob, or, as
            // an unprivileged user, by the process's RLIMIT_NPROC (the caller's prlimit).
            if probe == "knob" { spindle_test_limit_threads(0) }
            try runEveryKindOfWork()
            print("STARVED OK shared workers=\(ThreadPool.shared.workerCount)")
            return
        }
        let (status, text) = try runChild(
            CommandLine.arguments[0],
            ["SpindleTests.ThreadLimitTests/testAProcessGivenNoWorkerThreadStillRunsEveryKindOfWork"],
            environment: ["SPINDLE_STARVED_PROBE": "knob", "PATH": "/usr/bin:/bin", "HOME": "/tmp"])
        XCTAssertEqual(status, 0, text)
        XCTAssertTrue(text.contains("STARVED OK shared workers=1"), text)
        XCTAssertTrue(text.contains("a process-wide pool runs on Spindle's spawner thread"), text)
    }

    /// Operations of every class with dependencies between them, direct submissions,
    /// fork-join, a parallel loop, async offload, a task on the pool and an actor on a
    /// class's executor: each must finish.
    private func runEveryKindOfWork() throws {
        let queue = OperationQueue()
        let ran = Counter()
        var previous: Operation?
        for qos in [QualityOfService.background, .utility, .default, .userInitiated, .userInteractive] {
            let op = BlockOperation { ran.increment() }
            op.qualityOfService = qos
            if let previous { op.addDependency(previous) }
            previous = op
            queue.addOperation(op)
        }
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(ran.value, 5)
        // Code that needs a worker's stack (a few MB deep): the spawner that runs it
        // has one.
        let deep = BlockOperation { XCTAssertEqual(starvedRecursion(1_500), 1_500) }
        queue.addOperation(deep)
        deep.waitUntilFinished()
        let pool = ThreadPool.shared
        let (a, b) = pool.run { pool.join({ 20 }, { 22 }) }
        XCTAssertEqual(a + b, 42)
        let done = DispatchSemaphore(value: 0)
        try pool.submit { done.signal() }
        XCTAssertEqual(done.wait(timeout: .now() + 20), .success, "a submitted closure did not run")
        let sum = Atomic<Int>(0)
        pool.concurrentPerform(iterations: 100) { sum.add($0, ordering: .relaxed) }
        XCTAssertEqual(sum.load(ordering: .relaxed), 4950)
        let asyncDone = DispatchSemaphore(value: 0)
        let results = Mutex<[Int]>([])
        Task {
            let offloaded = try await ThreadPool.forQualityOfService(.utility).run { 7 }
            let onPool = await Task(executorPreference: pool) { 8 }.value
            let counted = await StarvedCounter().add(9)
            results.locked { $0 = [offloaded, onPool, counted] }
            asyncDone.signal()
        }
        XCTAssertEqual(asyncDone.wait(timeout: .now() + 20), .success, "async work did not finish")
        XCTAssertEqual(results.locked { $0 }, [7, 8, 9])
    }

}

/// Spindle's own threads leave open what a crash's backtrace needs.
final class SignalMaskTests: XCTestCase {
    /// The SigBlk mask of thread `tid`, from /proc.
    func blocked(_ tid: String) -> UInt64? {
        guard let status = try? String(contentsOfFile: "/proc/self/task/\(tid)/status", encoding: .utf8),
              let line = status.split(separator: "\n").first(where: { $0.hasPrefix("SigBlk:") }) else { return nil }
        return UInt64(line.dropFirst("SigBlk:".count).trimmingCharacters(in: .whitespaces), radix: 16)
    }

    func testTheSpawnerAndMonitorLeaveSIGPROFAndFaultsOpen() throws {
        let pool = try ThreadPool(workers: 1) // the spawner and the monitor exist now
        defer { try? pool.shutdown() }
        let ours = threads().filter { $0.name == "spindle-spawn" || $0.name == "spindle-monitor" }
        XCTAssertEqual(Set(ours.map(\.name)), ["spindle-spawn", "spindle-monitor"])
        for thread in ours {
            let mask = try XCTUnwrap(blocked(thread.tid), thread.name)
            for sig in [SIGPROF, SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP, SIGABRT] {
                XCTAssertEqual(mask & (1 << UInt64(sig - 1)), 0, "\(thread.name) blocks signal \(sig)")
            }
            XCTAssertNotEqual(mask & (1 << UInt64(SIGTERM - 1)), 0, "\(thread.name) should block SIGTERM")
        }
    }
}

/// Recursion `depth` frames deep, each holding 768 bytes of stack: about 1.5 MB at a
/// depth of 1500, several times the 256 KiB of a service thread, and well within a
/// worker's 8 MB even with a sanitizer's larger frames.
@inline(never)
private func starvedRecursion(_ depth: Int) -> Int {
    withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 768) { pad in
        pad.initialize(repeating: UInt8(truncatingIfNeeded: depth))
        return depth == 0 ? 0 : 1 + starvedRecursion(depth - 1) + Int(pad[767]) - Int(UInt8(truncatingIfNeeded: depth))
    }
}

/// An actor on the background class's executor, for ThreadLimitTests.
private actor StarvedCounter {
    static let executor = ActorExecutor(qualityOfService: .background)
    nonisolated var unownedExecutor: UnownedSerialExecutor { Self.executor.asUnownedSerialExecutor() }
    private var total = 0
    func add(_ n: Int) -> Int {
        total += n
        return total
    }
}
