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

    func testDroppingTheLastReferenceToABusyPoolDoesNotWaitForItsWork() throws {
        var pool: ThreadPool? = try ThreadPool(workers: 1)
        let forever = Resubmitter(pool!)
        try pool!.submit { forever.go() }
        let started = Date()
        pool = nil // the drain would never end while `forever` resubmits
        XCTAssertLessThan(Date().timeIntervalSince(started), 1, "deinit waited for the pool's work")
        // Let the helper thread's drain finish, so nothing spins for the rest of the run.
        forever.stop.store(true, ordering: .relaxed)
        XCTAssertTrue(eventually {
            let r = forever.runs.load(ordering: .relaxed)
            usleep(5_000)
            return forever.runs.load(ordering: .relaxed) == r
        })
    }
}
