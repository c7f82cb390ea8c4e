import CSpindle
import CSpindleTesting
import Foundation
@testable import Spindle
import Synchronization
import XCTest


/// What a new pool takes from the thread that creates it, and what it must not.
final class PoolCreationTests: XCTestCase {

    /// A thread starts with its creator's policy and nice, and an unprivileged one can
    /// never lower its nice or leave SCHED_IDLE. Workers are started by the process's
    /// spawner (spawn.c), so a pool created from inside SCHED_IDLE, nice +10 work starts
    /// at the process's own priority and moves only to what it asks for.
    func testAPoolCreatedInsideDemotedWorkStartsAtTheProcesssPriority() throws {
        let processPolicy = Int(sched_getscheduler(getpid()))
        let processNice = threadNice()
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
        // Its worker count is the process's: its CPUs, fewer under a CPU limit, or what
        // SPINDLE_WORKERS sets.
        XCTAssertEqual(Array(s.dropFirst()), ["workers=\(defaultWorkerCount(usable: usable))", "cpus=\(usable)"])
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
                        if innerDone.wait(timeout: .now() + 60) != .success { failed.add(1, ordering: .relaxed) }
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

    /// The monitor is started with the first pool, from whatever thread makes it. It must
    /// still run at the process's own nice, policy and CPUs, as the spawner and the
    /// workers do (spawn.c), not at those of a demoted, pinned creator. A fresh process
    /// (a forked child) is the only place whose first pool a test controls.
    func testTheMonitorRunsAtTheProcesssOwnPriorityAndCPUsWhoeverMadeTheFirstPool() throws {
        if Stress.isTSan { throw XCTSkip("ThreadSanitizer does not allow threads after fork") }
        _ = try ThreadPool(configuration: .init(workers: 1))
        let status = spindle_test_monitor_baseline_in_forked_child(10_000)
        if status == 14 {
            throw XCTSkip("without the privilege to lower a nice value the monitor keeps its creator's (the pool reports it); its policy and CPUs are the process's")
        }
        XCTAssertEqual(status, 0, [10: "the monitor has its creator's nice", 11: "the monitor has its creator's policy",
                                   12: "the monitor has its creator's CPU mask", 13: "no monitor thread started",
                                   15: "the monitor kept its creator's nice and the pool does not report it"][status] ?? "child status \(status)")
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
            XCTAssertEqual(p2.effectiveNice, Int32(threadNice()),
                           "refused: workers keep the process's nice")
        }
    }
}
