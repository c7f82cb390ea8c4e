import CSpindle
import Foundation
@testable import Spindle
import Synchronization
import XCTest


/// Shutting a pool down, destroying it, and what an idle one costs.
final class PoolLifecycleTests: XCTestCase {
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
        // No spare workers (`holdablePool`): a spare started for the held worker, once
        // the monitor sees it blocked, would run the queued closures before the shutdown
        // begins, however briefly a busy machine delays this thread.
        let pool = try holdablePool(workers: 1)
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

    /// Several outside submitters racing either kind of shutdown: every closure is
    /// released exactly once (run, cancelled or refused), a drain runs every accepted
    /// one, and no closure runs after `shutdown` has returned.
    func testManySubmittersRacingEitherShutdownLoseNothing() throws {
        for round in 0..<Stress.count(40) {
            let mode: ThreadPool.ShutdownMode = round % 2 == 0 ? .drain : .cancel
            let pool = try ThreadPool(workers: 2)
            let counter = ReleaseCounter()
            let accepted = Atomic<Int>(0), ran = Atomic<Int>(0), ranAfterShutdown = Atomic<Int>(0)
            let shutDown = Atomic<Bool>(false), go = Atomic<Bool>(false)
            let submitters = 3, perSubmitter = 2_000
            let threads = (0..<submitters).map { _ in
                Thread {
                    while !go.load(ordering: .acquiring) {}
                    for _ in 0..<perSubmitter {
                        let token = Token(counter)
                        do {
                            try pool.submit {
                                _ = token
                                ran.add(1, ordering: .relaxed)
                                if shutDown.load(ordering: .acquiring) { ranAfterShutdown.add(1, ordering: .relaxed) }
                            }
                            accepted.add(1, ordering: .relaxed)
                        } catch {}
                    }
                }
            }
            threads.forEach { $0.start() }
            go.store(true, ordering: .releasing)
            usleep(UInt32.random(in: 0...400))
            try pool.shutdown(mode)
            shutDown.store(true, ordering: .releasing)
            while !threads.allSatisfy(\.isFinished) { usleep(100) }
            XCTAssertEqual(counter.released.load(ordering: .acquiring), submitters * perSubmitter,
                           "every closure is released once, run, cancelled or refused (\(mode))")
            XCTAssertEqual(ranAfterShutdown.load(ordering: .acquiring), 0, "a closure ran after shutdown returned (\(mode))")
            if mode == .drain {
                XCTAssertEqual(accepted.load(ordering: .acquiring), ran.load(ordering: .acquiring))
            } else {
                XCTAssertLessThanOrEqual(ran.load(ordering: .acquiring), accepted.load(ordering: .acquiring))
            }
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
        // Warm up: make every worker run and go back to sleep. The wait is for the last
        // task, however busy the machine; the sleep after it is for the workers' search
        // before they park, which takes microseconds.
        let ran = Counter()
        for _ in 0..<10_000 { try pool.submit { ran.increment() } }
        XCTAssertTrue(eventually(within: 60) { ran.value == 10_000 })
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
        XCTAssertEqual(done.wait(timeout: .now() + 60), .success)
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
}
