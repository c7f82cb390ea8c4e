import Dispatch
import Foundation
@testable import Spindle
import Synchronization
import XCTest

/// `ThreadPool` as a `TaskExecutor` (ThreadPool+TaskExecutor.swift).
final class TaskExecutorTests: XCTestCase {
    func testTasksPreferringThePoolRunOnItsWorkersAndSoDoTheirChildren() async throws {
        let pool = try ThreadPool(workers: 2)
        let onWorker = await Task(executorPreference: pool) { pool.isCurrentThreadWorker }.value
        XCTAssertTrue(onWorker, "a task preferring the pool ran elsewhere")

        // Child tasks inherit the preference, and come back to the pool after they
        // suspend.
        let placements = await withTaskExecutorPreference(pool) {
            await withTaskGroup(of: [Bool].self) { group in
                for _ in 0..<64 {
                    group.addTask {
                        let before = pool.isCurrentThreadWorker
                        await Task.yield()
                        return [before, pool.isCurrentThreadWorker]
                    }
                }
                return await group.reduce(into: [Bool]()) { $0 += $1 }
            }
        }
        XCTAssertEqual(placements.count, 128)
        XCTAssertEqual(placements.filter { !$0 }.count, 0, "child tasks ran off the pool")

        // Without the preference the same code runs on the cooperative pool: the check
        // above can fail.
        let detached = await Task.detached { pool.isCurrentThreadWorker }.value
        XCTAssertFalse(detached)
        try await pool.shutdown()
    }

    func testAClassPoolGivesTheTasksCodeItsNiceValue() async {
        let pool = ThreadPool.forQualityOfService(.background)
        let nice = await Task(executorPreference: pool) { currentThreadNice() }.value
        XCTAssertEqual(nice, Int(pool.effectiveNice))
        XCTAssertEqual(nice, classNice(.background), "background work runs at the process's nice +10")
    }

    /// A job queued when a cancelling shutdown discards the queue, and one submitted
    /// after shutdown began, both run — elsewhere: a dropped job would leave its task
    /// suspended forever, and this test waiting on it.
    func testJobsThePoolCannotRunAreHandedOnNotDropped() async throws {
        // No spare workers: a spare started for the held worker, once the monitor sees it
        // blocked (two ticks, which a busy machine gives it), would run the queued jobs
        // before the shutdown begins.
        var config = ThreadPool.Configuration(workers: 1)
        config.maxSpareWorkers = 0
        let pool = try ThreadPool(configuration: config)
        // Hold the only worker so that the tasks' jobs stay queued.
        let gate = DispatchSemaphore(value: 0), holding = DispatchSemaphore(value: 0)
        try pool.submit {
            holding.signal()
            gate.wait()
        }
        holding.wait()
        let n = 50
        let queued = (0..<n).map { i in
            Task(executorPreference: pool) { (i, pool.isCurrentThreadWorker) }
        }
        let shutdownReturned = DispatchSemaphore(value: 0)
        Thread {
            try? pool.shutdown(.cancel)
            shutdownReturned.signal()
        }.start()
        while !pool.isShuttingDown { usleep(100) }
        gate.signal()

        let after = Task(executorPreference: pool) { (n, pool.isCurrentThreadWorker) }
        let done = expectation(description: "every task finished")
        let results = Mutex<[(Int, Bool)]>([])
        Task.detached {
            for t in queued + [after] {
                let r = await t.value
                results.locked { $0.append(r) }
            }
            done.fulfill()
        }
        await fulfillment(of: [done], timeout: 20)
        let all = results.locked { $0 }
        XCTAssertEqual(all.map(\.0), Array(0...n), "a task never finished, or finished with another's value")
        XCTAssertEqual(all.filter(\.1).count, 0, "a job ran on a worker of a pool cancelling its queue")
        XCTAssertEqual(shutdownReturned.wait(timeout: .now() + 60), .success)
    }

    /// Tasks on the shared pool that wait synchronously for operations queued on that
    /// same pool: each waiting worker blocks, and the pool runs spare workers meanwhile,
    /// so the operations run. Rounds of 40 waits at once: fewer than the pool's spare
    /// workers (64 by default), which bound how many can block together — past that,
    /// waits on work queued behind them wait for a worker to return, as with Dispatch's
    /// thread limit.
    func testSynchronousWaitsInsideTasksOnThePoolKeepItRunning() async {
        let queue = OperationQueue()
        let rounds = Stress.count(50), perRound = 40
        final class Count: Sendable { let value = Atomic<Int>(0) }
        let ran = Count()
        let done = expectation(description: "every task finished")
        Task.detached {
            await withTaskExecutorPreference(ThreadPool.shared) {
                for _ in 0..<rounds {
                    await withTaskGroup(of: Void.self) { group in
                        for i in 0..<perRound {
                            group.addTask {
                                let op = BlockOperation { ran.value.add(1, ordering: .relaxed) }
                                queue.addOperation(op)
                                if i % 2 == 0 { op.waitUntilFinished() } else { await op.finished() }
                                XCTAssertTrue(op.isFinished)
                            }
                        }
                    }
                }
            }
            done.fulfill()
        }
        await fulfillment(of: [done], timeout: 120)
        XCTAssertEqual(ran.value.load(ordering: .relaxed), rounds * perRound)
    }

    /// Many tasks on the pool, half of them suspending on the way: each body runs
    /// exactly once, and on the pool. Size from `SPINDLE_STRESS`.
    func testManyTasksEachRunExactlyOnceOnThePool() async throws {
        let pool = try ThreadPool(workers: 2)
        let n = Stress.count(20_000)
        final class Tally: Sendable {
            let runs: Mutex<[UInt8]>
            let offPool = Atomic<Int>(0)
            init(_ n: Int) { runs = Mutex([UInt8](repeating: 0, count: n)) }
        }
        let tally = Tally(n)
        await withTaskExecutorPreference(pool) {
            await withTaskGroup(of: Void.self) { group in
                for i in 0..<n {
                    group.addTask {
                        if i % 2 == 0 { await Task.yield() }
                        if !pool.isCurrentThreadWorker { tally.offPool.add(1, ordering: .relaxed) }
                        tally.runs.locked { $0[i] &+= 1 }
                    }
                }
            }
        }
        let counts = tally.runs.locked { $0 }
        XCTAssertEqual(counts.filter { $0 == 0 }.count, 0, "lost")
        XCTAssertEqual(counts.filter { $0 > 1 }.count, 0, "duplicated")
        XCTAssertEqual(tally.offPool.load(ordering: .relaxed), 0)
        try await pool.shutdown()
    }
}
