import CSpindle
import Foundation
import Synchronization
import XCTest

@testable import Spindle

/// A pool that a `Blocker` can hold: no spare workers, so that work stays queued behind
/// a blocked worker instead of going to a spare (`Configuration.maxSpareWorkers`).
func holdablePool(workers: Int, queueLimit: Int? = nil) throws -> ThreadPool {
    var c = ThreadPool.Configuration(workers: workers)
    c.maxSpareWorkers = 0
    c.queueLimit = queueLimit
    return try ThreadPool(configuration: c)
}

/// A worker held busy until the test lets it go: for tests that need work to stay
/// queued behind it (in a `holdablePool`).
final class Blocker: Sendable {
    let started = DispatchSemaphore(value: 0)
    let release = DispatchSemaphore(value: 0)

    /// Occupies one worker of `pool` until `open()`.
    func occupy(_ pool: ThreadPool) throws {
        try pool.submit { [self] in
            started.signal()
            release.wait()
        }
        started.wait()
    }

    func open(_ count: Int = 1) { for _ in 0..<count { release.signal() } }
}

struct Thrown: Error, Equatable { let code: Int }

/// `ThreadPool.run` for async code, `shutdown` awaited, and `OperationQueue.run`.
final class AsyncOffloadTests: XCTestCase {
    func testRunReturnsTheClosuresValueFromAWorker() async throws {
        let pool = try ThreadPool(workers: 2)
        let (value, onWorker) = try await pool.run { (6 * 7, pool.isCurrentThreadWorker) }
        XCTAssertEqual(value, 42)
        XCTAssertTrue(onWorker, "the closure ran off the pool")
        try await pool.shutdown()
    }

    /// A task that already runs on the pool (it prefers the pool as its executor) runs
    /// `run`'s closure inline: inside the calling task, with no hand-off. An offloaded
    /// closure runs on a worker outside any task, which this tells apart. A task that
    /// does not prefer the pool still hands the closure over.
    func testRunFromATaskOnThePoolRunsTheClosureInline() async throws {
        let pool = try ThreadPool(workers: 1)
        let insideTask: @Sendable () -> Bool = { withUnsafeCurrentTask { $0 != nil } }
        let (onWorker, inline) = try await withTaskExecutorPreference(pool) {
            (pool.isCurrentThreadWorker, try await pool.run(insideTask))
        }
        XCTAssertTrue(onWorker, "the preference did not move the task to the pool")
        XCTAssertTrue(inline, "the closure was handed off although the task was on a worker")
        let offloaded = try await pool.run(insideTask)
        XCTAssertFalse(offloaded, "from off the pool, the closure ran inside the calling task")

        // Inline or not, a cancelled task's closure never starts.
        let started = Counter()
        let cancelled = Task(executorPreference: pool) {
            withUnsafeCurrentTask { $0!.cancel() }
            return try await pool.run { started.increment() }
        }
        do {
            _ = try await cancelled.value
            XCTFail("a cancelled task's run returned")
        } catch is CancellationError {}
        XCTAssertEqual(started.value, 0, "a cancelled task's closure ran inline")
        try await pool.shutdown()
    }

    func testRunRethrowsTheClosuresError() async throws {
        let pool = try ThreadPool(workers: 1)
        do {
            _ = try await pool.run { () throws -> Int in throw Thrown(code: 7) }
            XCTFail("no error")
        } catch let error as Thrown {
            XCTAssertEqual(error, Thrown(code: 7))
        }
        try await pool.shutdown()
    }

    func testACancelledTaskNeverStartsItsClosure() async throws {
        let pool = try holdablePool(workers: 1)
        let blocker = Blocker()
        try blocker.occupy(pool)
        let ran = Atomic<Bool>(false)
        let task = Task { try await pool.run { ran.store(true, ordering: .relaxed) } }
        while spindle_pool_queued(pool.raw) < 1 { try await Task.sleep(for: .milliseconds(1)) } // queued behind the blocker
        task.cancel()
        await assertEndsCancelled(task, "a cancelled offload returned")
        blocker.open()
        try await pool.shutdown(.drain)
        XCTAssertFalse(ran.load(ordering: .relaxed), "the closure of a cancelled task ran")
    }

    /// A task cancelled before it calls `run` gets `CancellationError`, and its closure is
    /// neither run nor submitted: on a pool without a queue limit, whose workers run no
    /// task for it; on a pool with a limit, whose place it leaves free; and, with `.fail`
    /// on a full one, the cancellation is what it hears, not the refusal.
    func testATaskCancelledBeforeRunNeverSubmitsItsClosure() async throws {
        let started = Counter()
        /// A task that cancels itself, then calls `run` on `pool`.
        func cancelledRun(_ pool: ThreadPool, ifFull: ThreadPool.FullPolicy = .wait) -> Task<Void, any Error> {
            Task {
                withUnsafeCurrentTask { $0!.cancel() }
                try await pool.run(ifFull: ifFull) { started.increment() }
            }
        }
        let plain = try ThreadPool(workers: 1)
        await assertEndsCancelled(cancelledRun(plain), "a task cancelled before run was not told")
        try await plain.shutdown(.drain)
        XCTAssertEqual(plain.stats.reduce(0) { $0 + $1.executed }, 0, "a cancelled task's closure was submitted")

        let limited = try holdablePool(workers: 1, queueLimit: 1)
        await assertEndsCancelled(cancelledRun(limited), "a task cancelled before run on a limited pool was not told")
        // Its place is free: with the worker held, the one queued closure the limit
        // allows is admitted.
        let blocker = Blocker()
        try blocker.occupy(limited)
        XCTAssertTrue(limited.trySubmit {}, "a cancelled run kept its place")
        // Now full: a cancelled fail-fast run hears of its cancellation.
        await assertEndsCancelled(cancelledRun(limited, ifFull: .fail),
                                  "a cancelled fail-fast run on a full pool was not told it was cancelled")
        blocker.open()
        try await limited.shutdown(.drain)
        XCTAssertEqual(started.value, 0, "a cancelled task's closure ran")
    }

    func testAClosureThatStartedRunsToItsEnd() async throws {
        let pool = try ThreadPool(workers: 1)
        let inside = DispatchSemaphore(value: 0)
        let proceed = DispatchSemaphore(value: 0)
        let task = Task {
            try await pool.run { () -> Int in
                inside.signal()
                proceed.wait()
                return 5
            }
        }
        await withCheckedContinuation { c in DispatchQueue.global().async { inside.wait(); c.resume() } }
        task.cancel()
        proceed.signal()
        let value = try await task.value
        XCTAssertEqual(value, 5, "a started closure's result is returned despite the cancellation")
        try await pool.shutdown()
    }

    func testACancellingShutdownTellsTheAwaitingTask() async throws {
        let pool = try holdablePool(workers: 1)
        let blocker = Blocker()
        try blocker.occupy(pool)
        let ran = Atomic<Bool>(false)
        let task = Task { try await pool.run { ran.store(true, ordering: .relaxed) } }
        while spindle_pool_queued(pool.raw) < 1 { try await Task.sleep(for: .milliseconds(1)) } // queued behind the blocker
        let shutdown = Task { try await pool.shutdown(.cancel) }
        while !pool.isShuttingDown { try await Task.sleep(for: .milliseconds(1)) }
        // The running closure finishes; the queued one is discarded, not run.
        blocker.open()
        do {
            try await task.value
            XCTFail("an offload discarded by shutdown returned")
        } catch let error as ThreadPool.Error {
            XCTAssertEqual(error, .shutDown)
        }
        try await shutdown.value
        XCTAssertFalse(ran.load(ordering: .relaxed))
        do {
            _ = try await pool.run { 1 }
            XCTFail("a shut-down pool accepted an offload")
        } catch let error as ThreadPool.Error {
            XCTAssertEqual(error, .shutDown)
        }
    }

    func testAwaitedShutdownDrainsWithoutHoldingTheCallersThread() async throws {
        let pool = try ThreadPool(workers: 2)
        let count = Atomic<Int>(0)
        for _ in 0..<1000 { try pool.submit { count.add(1, ordering: .relaxed) } }
        try await pool.shutdown(.drain)
        XCTAssertEqual(count.load(ordering: .relaxed), 1000)
        XCTAssertTrue(pool.isShuttingDown)
    }

    func testManyTasksOffloadingAtOnceAllGetTheirOwnResult() async throws {
        let pool = try ThreadPool(workers: 2)
        let n = Stress.count(2000)
        let sum = try await withThrowingTaskGroup(of: Int.self) { group in
            for i in 0..<n { group.addTask { try await pool.run { i * 2 } } }
            return try await group.reduce(0, +)
        }
        XCTAssertEqual(sum, n * (n - 1))
        try await pool.shutdown()
    }

    /// The queue's `run` hands its value over exactly once, whatever its size: a class
    /// instance is neither leaked nor released twice, a value larger than a few words
    /// and an empty one come back whole.
    func testTheQueuesRunHandsOverItsValueOnce() async throws {
        final class Tracked: Sendable {
            let released: Counter
            let payload: [Int]
            init(_ released: Counter, _ payload: [Int]) { self.released = released; self.payload = payload }
            deinit { released.increment() }
        }
        let queue = OperationQueue()
        let released = Counter()
        for i in 0..<200 {
            let tracked = try await queue.run { Tracked(released, Array(0...i)) }
            XCTAssertEqual(tracked.payload.count, i + 1)
        }
        XCTAssertEqual(released.value, 200, "a value was leaked or released twice")
        let wide = try await queue.run { (1, "two", 3.0, [4], Int64(5), UInt8(6)) }
        XCTAssertTrue(wide == (1, "two", 3.0, [4], 5, 6) as (Int, String, Double, [Int], Int64, UInt8))
        let empty: Void = try await queue.run { () }
        XCTAssertNotNil(empty as Void?)
        // Four words, the most kept in the outcome itself, one of them a reference.
        let four = try await queue.run { (7, 8, String(repeating: "x", count: 100)) }
        XCTAssertTrue(four == (7, 8, String(repeating: "x", count: 100)))
        // More aligned than a word: kept apart, at its own alignment.
        let aligned = try await queue.run { SIMD4<Float>(1, 2, 3, 4) }
        XCTAssertEqual(aligned, SIMD4<Float>(1, 2, 3, 4))
        await queue.allOperationsFinished()
    }

    func testTheQueuesRunReturnsAValueAndHonoursCancellation() async throws {
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 1
        let value = try await queue.run { OperationQueue.current === queue }
        XCTAssertTrue(value, "the closure did not run as an operation of the queue")

        queue.isSuspended = true
        let ran = Atomic<Bool>(false)
        let task = Task { try await queue.run { ran.store(true, ordering: .relaxed) } }
        while queue.operationCount == 0 { try await Task.sleep(for: .milliseconds(1)) } // it is queued
        task.cancel()
        // A cancelled operation still leaves its queue the way Foundation's do: once
        // the queue retires it (here, when it resumes), without running its block.
        queue.isSuspended = false
        await assertEndsCancelled(task, "a cancelled operation returned")
        await queue.allOperationsFinished()
        XCTAssertFalse(ran.load(ordering: .relaxed))

        do {
            _ = try await queue.run { () throws -> Int in throw Thrown(code: 3) }
            XCTFail("no error")
        } catch let error as Thrown {
            XCTAssertEqual(error.code, 3)
        }
    }

    func testAddOperationsAwaitedReturnsOnceAllHaveFinished() async {
        let queue = OperationQueue()
        let done = Atomic<Int>(0)
        let ops = (0..<50).map { _ in BlockOperation { usleep(100); done.add(1, ordering: .relaxed) } }
        await queue.addOperations(ops)
        XCTAssertEqual(done.load(ordering: .relaxed), 50)
        XCTAssertTrue(ops.allSatisfy(\.isFinished))
    }
}
