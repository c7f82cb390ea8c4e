import CSpindle
import Foundation
import Synchronization
import XCTest

@testable import Spindle

/// Shutdown can be escalated, every caller returns only once the pool has stopped, and
/// dropping the last reference never waits for the pool's work.
final class ShutdownTests: XCTestCase {
    /// A closure that resubmits itself until `stop` is set: a drain never finishes.
    final class Resubmitter: @unchecked Sendable {
        let pool: ThreadPool
        let stop = Atomic<Bool>(false)
        let runs = Atomic<Int>(0)
        init(_ pool: ThreadPool) { self.pool = pool }
        func go() {
            runs.add(1, ordering: .relaxed)
            usleep(200)
            if !stop.load(ordering: .relaxed) { try? pool.submit { self.go() } }
        }
    }

    static func spin(microseconds: Int) {
        let end = DispatchTime.now().uptimeNanoseconds + UInt64(microseconds) * 1_000
        while DispatchTime.now().uptimeNanoseconds < end {}
    }

    func testACancelTakesOverADrainThatCannotFinish() throws {
        let pool = try ThreadPool(workers: 2)
        let forever = Resubmitter(pool)
        try pool.submit { forever.go() }
        let ran = Counter()
        // CPU work (a sleep would be compensated by spare workers): ~0.5 s on two workers.
        for _ in 0..<1_000 { try pool.submit { ShutdownTests.spin(microseconds: 1_000); ran.increment() } }
        let drained = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            try? pool.shutdown(.drain)
            drained.signal()
        }
        usleep(50_000)
        XCTAssertEqual(drained.wait(timeout: .now() + 0.05), .timedOut, "the drain cannot finish")
        let cancelled = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            try? pool.shutdown(.cancel)
            cancelled.signal()
        }
        XCTAssertEqual(cancelled.wait(timeout: .now() + 60), .success, "shutdown(.cancel) did not stop the pool")
        XCTAssertEqual(drained.wait(timeout: .now() + 60), .success, "the drain's caller did not return")
        let runs = forever.runs.load(ordering: .relaxed)
        usleep(20_000)
        XCTAssertEqual(forever.runs.load(ordering: .relaxed), runs, "work ran after every shutdown returned")
        XCTAssertLessThan(ran.value, 1_000, "cancel released nothing")
    }

    func testEveryConcurrentDrainReturnsOnlyOnceTheWorkHasRun() throws {
        let pool = try ThreadPool(workers: 1)
        let ran = Counter()
        let n = 300
        for _ in 0..<n { try pool.submit { usleep(200); ran.increment() } }
        let seen = Mutex<[Int]>([])
        onThreads(3) { _ in
            try? pool.shutdown(.drain)
            let r = ran.value
            seen.locked { $0.append(r) }
        }
        XCTAssertEqual(seen.locked { $0 }, [n, n, n], "a caller returned before the pool had stopped")
    }

    /// Resubmits itself to the engine's pool directly, holding no reference to the
    /// `ThreadPool` object, so that the test's reference to it is the last one while the
    /// work goes on.
    final class EngineResubmitter: @unchecked Sendable {
        // @unchecked: `raw` never changes; the engine's pool is freed only once its
        // drain, which runs every task this one submits from inside a task, is over.
        let raw: OpaquePointer
        let stop = Atomic<Bool>(false)
        let runs = Atomic<Int>(0)
        init(_ raw: OpaquePointer) { unsafe self.raw = raw }
        func go() {
            runs.add(1, ordering: .relaxed)
            usleep(200)
            guard !stop.load(ordering: .relaxed) else { return }
            let task = unsafe ClosureTask.make { self.go() }
            if unsafe spindle_submit_task(raw, task) != 0 { unsafe releaseRefusedTask(task) }
        }
    }

    final class PoolHolder: @unchecked Sendable {
        // @unchecked: `pool` is set once here and cleared once, by one thread.
        var pool: ThreadPool?
        init(_ pool: ThreadPool) { self.pool = pool }
    }

    func testDroppingTheLastReferenceToABusyPoolDoesNotWaitForItsWork() throws {
        let holder = PoolHolder(try ThreadPool(workers: 1))
        let forever = unsafe EngineResubmitter(holder.pool!.raw)
        try holder.pool!.submit { forever.go() }
        XCTAssertTrue(eventually { forever.runs.load(ordering: .relaxed) > 0 })
        // A drain never ends while `forever` resubmits: a deinit that waited for the
        // pool's work would not return at all.
        let dropped = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            holder.pool = nil
            dropped.signal()
        }
        XCTAssertEqual(dropped.wait(timeout: .now() + 60), .success, "deinit waited for the pool's work")
        // The work goes on after the last reference is gone: it is drained, not dropped.
        let before = forever.runs.load(ordering: .relaxed)
        XCTAssertTrue(eventually { forever.runs.load(ordering: .relaxed) > before }, "the busy pool stopped running its work")
        // Let the helper thread's drain finish, so nothing spins for the rest of the run.
        forever.stop.store(true, ordering: .relaxed)
        XCTAssertTrue(eventually {
            let r = forever.runs.load(ordering: .relaxed)
            usleep(5_000)
            return forever.runs.load(ordering: .relaxed) == r
        })
    }
}
