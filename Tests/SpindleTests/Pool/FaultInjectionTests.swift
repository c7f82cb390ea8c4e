import CSpindle
import CSpindleTesting
import Foundation
import Synchronization
import XCTest

@testable import Spindle

/// Counts the allocations a pool makes through the node allocator seam, and fails the
/// one numbered `failAt` (nil: none).
private enum FailingAllocator {
    static let calls = Atomic<Int>(0)
    static let live = Atomic<Int>(0)
    static let failAt = Atomic<Int>(-1)

    static func reset(failAt k: Int) {
        calls.store(0, ordering: .relaxed)
        live.store(0, ordering: .relaxed)
        failAt.store(k, ordering: .relaxed)
    }

    static func install(_ cfg: inout spindle_config) {
        cfg.alloc_on_node = { bytes, _, _ in
            let call = FailingAllocator.calls.add(1, ordering: .relaxed).oldValue
            if call == FailingAllocator.failAt.load(ordering: .relaxed) { return nil }
            guard let mem = malloc(bytes) else { return nil }
            FailingAllocator.live.add(1, ordering: .relaxed)
            return mem
        }
        cfg.free_on_node = { mem, _, _ in
            FailingAllocator.live.subtract(1, ordering: .relaxed)
            free(mem)
        }
    }
}

/// A pool whose creation fails part way, because an allocation or a thread is refused,
/// reports the error and leaves nothing behind: no memory, no thread, no half-made
/// pool (pool.c: one unwinding path, free_pool).
final class FaultInjectionTests: XCTestCase {
    override func tearDown() { spindle_test_limit_threads(-1) }

    /// Every node allocation of a four-worker pool (a state block and a deque ring per
    /// worker) refused in turn: ENOMEM each time, and every allocation made before the
    /// refused one is freed.
    func testEachRefusedAllocationFailsCreationAndFreesWhatWasMade() throws {
        var made = 0
        for k in 0..<16 {
            FailingAllocator.reset(failAt: k)
            var cfg = spindle_config()
            spindle_config_init(&cfg)
            cfg.workers = 4
            cfg.pinning = Int32(SPINDLE_PIN_NONE.rawValue)
            FailingAllocator.install(&cfg)
            var raw: OpaquePointer?
            let rc = spindle_pool_create(&cfg, &raw)
            let calls = FailingAllocator.calls.load(ordering: .relaxed)
            if k >= calls {
                // Fewer allocations than k: creation succeeded without meeting the fault.
                XCTAssertEqual(rc, 0)
                let pool = try XCTUnwrap(raw)
                XCTAssertEqual(spindle_pool_destroy(pool, SPINDLE_SHUTDOWN_DRAIN), 0)
                made = calls
                break
            }
            XCTAssertEqual(rc, ENOMEM, "allocation \(k) refused")
            XCTAssertNil(raw, "allocation \(k) refused, yet a pool came back")
            XCTAssertEqual(FailingAllocator.live.load(ordering: .relaxed), 0, "allocation \(k) refused: memory left behind")
        }
        XCTAssertEqual(made, 8, "a state block and a deque ring per worker")
        XCTAssertEqual(FailingAllocator.live.load(ordering: .relaxed), 0, "the pool freed what it made")
    }

    /// The k-th worker thread refused (as under a thread limit): the pool's creation
    /// throws the system's error, and the workers already started are stopped and joined
    /// before it returns, so none of the pool's threads is left. The pool's threads are
    /// told apart by their name: other threads of the process (Dispatch's, the
    /// sanitizer's) come and go on their own.
    func testEachRefusedWorkerThreadFailsCreationAndStopsTheOthers() throws {
        for k in 0..<4 {
            var cfg = ThreadPool.Configuration(workers: 4)
            cfg.name = "refused\(k)-w"
            spindle_test_limit_threads(Int32(k))
            XCTAssertThrowsError(try ThreadPool(configuration: cfg), "worker \(k) refused") { error in
                guard case ThreadPool.Error.systemError(let e) = error else { return XCTFail("\(error)") }
                XCTAssertEqual(e, EAGAIN)
            }
            spindle_test_limit_threads(-1)
            // Joined is not yet gone: the kernel wakes pthread_join as the thread leaves
            // its memory, and removes its /proc entry a moment later. A thread left
            // behind never goes.
            let ours = { threadNames().filter { $0.hasPrefix(cfg.name) } }
            XCTAssertTrue(eventually { ours().isEmpty }, "worker \(k) refused: threads left behind: \(ours())")
        }
    }

    /// The engine's own threads refused one kind at a time, each in a fresh process
    /// (a forked child, where the spawner and the monitor do not exist yet):
    /// - no spawner: pool creation fails with EAGAIN and leaves no thread, and works
    ///   once threads are allowed again;
    /// - no monitor: a task that says it blocks still gets a spare, which runs the next
    ///   task meanwhile;
    /// - no spare: the next task waits for the blocked one to return, and runs.
    /// Every task runs in each.
    func testEachRefusedEngineThreadDegradesWithoutLosingWork() throws {
        // ThreadSanitizer kills a child that starts threads after a multi-threaded fork
        // (die_after_fork).
        if Stress.isTSan { throw XCTSkip("ThreadSanitizer does not allow threads after fork") }
        for (kind, name) in [(SPINDLE_TEST_REFUSE_SPAWNER, "spawner"), (SPINDLE_TEST_REFUSE_MONITOR, "monitor"),
                             (SPINDLE_TEST_REFUSE_SPARE, "spare")] {
            XCTAssertEqual(spindle_test_refused_thread_in_forked_child(Int32(kind), 120_000), 0,
                           "the \(name) refused")
        }
    }

    /// A spare the system refused is tried again once the pause after a refusal has
    /// passed (spare.c, C4), by the monitor when nothing else prompts it: a task that
    /// blocks until the task queued behind it has run gets a spare once threads are
    /// allowed again, and does not wait for ever.
    func testARefusedSpareIsTriedAgainWhileItsWorkerBlocks() throws {
        if Stress.isTSan { throw XCTSkip("ThreadSanitizer does not allow threads after fork") }
        XCTAssertEqual(spindle_test_spare_allowed_again_in_forked_child(120_000), 0)
    }

    /// The same, with the worker's blocking and the refusal placed between the monitor's
    /// look that finds the idle pool with nothing to watch and its look before it sleeps
    /// (spare.c, MI1): the second look must see the worker counted out and keep the
    /// monitor awake, or nothing tries the spare again.
    func testARefusedSpareIsTriedAgainWhenItsWorkerBlocksBetweenTheMonitorsLooks() throws {
        if Stress.isTSan { throw XCTSkip("ThreadSanitizer does not allow threads after fork") }
        XCTAssertEqual(spindle_test_spare_allowed_again_between_monitor_looks_in_forked_child(120_000), 0)
    }

    /// A spare claimed before a shutdown and refused by the system after the pool's last
    /// worker parked (shutdown step 4, spare.c): the refusal wakes the workers to look
    /// for quiescence again, so the shutdown finishes and every task has run.
    func testASpareRefusedDuringShutdownLetsItFinish() throws {
        if Stress.isTSan { throw XCTSkip("ThreadSanitizer does not allow threads after fork") }
        XCTAssertEqual(spindle_test_spare_refused_during_shutdown_in_forked_child(60_000), 0)
    }
}
