import Foundation
import Synchronization
import XCTest

@testable import Spindle

/// The largest value seen, from any thread.
final class MaxTracker: Sendable {
    private let value = Atomic<Int>(0)
    var max: Int { value.load(ordering: .relaxed) }
    func see(_ v: Int) {
        var seen = value.load(ordering: .relaxed)
        while v > seen {
            let (done, now) = value.compareExchange(expected: seen, desired: v, ordering: .relaxed)
            if done { return }
            seen = now
        }
    }
}

/// A pool with a queue limit (Pool/Admission.swift, AD1-AD5).
final class AdmissionTests: XCTestCase {
    func limited(workers: Int, limit: Int) throws -> ThreadPool {
        try holdablePool(workers: workers, queueLimit: limit)
    }

    /// `n` tasks that each wait in line to run a closure logging its number, each in
    /// line before the next starts.
    func lineUp(_ n: Int, on pool: ThreadPool, logging order: Log) async throws -> [Task<Void, any Error>] {
        let admission = try XCTUnwrap(pool.admission)
        var tasks: [Task<Void, any Error>] = []
        for i in 0..<n {
            tasks.append(Task { try await pool.run { order.add("\(i)") } })
            while admission.waiting < i + 1 { try await Task.sleep(for: .milliseconds(1)) }
        }
        return tasks
    }

    /// `submit` and a fail-fast `run` both refuse with `overloaded`.
    func assertOverloaded(_ pool: ThreadPool, _ why: String, file: StaticString = #filePath, line: UInt = #line) async {
        XCTAssertThrowsError(try pool.submit {}, file: file, line: line) {
            XCTAssertEqual($0 as? ThreadPool.Error, .overloaded, file: file, line: line)
        }
        do {
            _ = try await pool.run(ifFull: .fail) { 1 }
            XCTFail("a fail-fast offload was queued \(why)", file: file, line: line)
        } catch {
            XCTAssertEqual(error as? ThreadPool.Error, .overloaded, file: file, line: line)
        }
    }

    func testAFullPoolSaysNoAtOnceToSynchronousAndFailFastSubmitters() async throws {
        let pool = try limited(workers: 1, limit: 2)
        let blocker = Blocker()
        try blocker.occupy(pool) // started, so it holds no slot
        XCTAssertTrue(pool.trySubmit {})
        XCTAssertTrue(pool.trySubmit {})
        XCTAssertFalse(pool.trySubmit {}, "a third closure was queued past a limit of 2")
        await assertOverloaded(pool, "past the limit")
        blocker.open()
        try await pool.shutdown()
    }

    func testTheLimitIsValidated() {
        var c = ThreadPool.Configuration(workers: 1)
        c.queueLimit = 0
        XCTAssertThrowsError(try ThreadPool(configuration: c))
    }

    func testAFloodFromManyTasksHoldsTheLimitAndLosesNoWaiter() async throws {
        let limit = 4
        let pool = try limited(workers: 2, limit: limit)
        let n = Stress.count(3000)
        let peak = MaxTracker()
        let admission = try XCTUnwrap(pool.admission)
        let sum = try await withThrowingTaskGroup(of: Int.self) { group in
            for i in 0..<n {
                group.addTask {
                    try await pool.run {
                        // Slots are given back when a closure starts, so what is queued
                        // while this one runs is still within the limit.
                        peak.see(admission.queued)
                        return i
                    }
                }
            }
            return try await group.reduce(0, +)
        }
        XCTAssertEqual(sum, n * (n - 1) / 2, "an offload was lost or ran twice")
        XCTAssertLessThanOrEqual(peak.max, limit)
        XCTAssertEqual(admission.queued, 0, "slots leaked")
        try await pool.shutdown()
    }

    func testWaitingSubmittersAreServedFirstComeFirstServed() async throws {
        let pool = try limited(workers: 1, limit: 1)
        let blocker = Blocker()
        try blocker.occupy(pool)
        XCTAssertTrue(pool.trySubmit {}) // the one slot
        let order = Log()
        let tasks = try await lineUp(20, on: pool, logging: order)
        XCTAssertFalse(pool.trySubmit {}, "a newcomer took a slot ahead of the line")
        blocker.open()
        for t in tasks { try await t.value }
        // With one slot and one worker, each closure starts before the next is granted.
        XCTAssertEqual(order.all, (0..<20).map(String.init))
        try await pool.shutdown()
    }

    func testACancelledWaiterLeavesTheLineCleanly() async throws {
        let pool = try limited(workers: 1, limit: 1)
        let blocker = Blocker()
        try blocker.occupy(pool)
        XCTAssertTrue(pool.trySubmit {})
        let admission = try XCTUnwrap(pool.admission)
        let ran = Log()
        let a = Task { try await pool.run { ran.add("a") } }
        while admission.waiting < 1 { try await Task.sleep(for: .milliseconds(1)) }
        let b = Task { try await pool.run { ran.add("b") } }
        while admission.waiting < 2 { try await Task.sleep(for: .milliseconds(1)) }
        a.cancel()
        await assertEndsCancelled(a, "a cancelled waiter was admitted")
        XCTAssertEqual(admission.waiting, 1)
        blocker.open()
        try await b.value
        try await pool.shutdown()
        XCTAssertEqual(ran.all, ["b"])
        XCTAssertEqual(admission.queued, 0)
    }

    func testShutdownRefusesTheWaitingSubmitters() async throws {
        let pool = try limited(workers: 1, limit: 1)
        let blocker = Blocker()
        try blocker.occupy(pool)
        XCTAssertTrue(pool.trySubmit {})
        let admission = try XCTUnwrap(pool.admission)
        let waiter = Task { try await pool.run { 1 } }
        while admission.waiting < 1 { try await Task.sleep(for: .milliseconds(1)) }
        let shutdown = Task { try await pool.shutdown(.drain) }
        do {
            _ = try await waiter.value
            XCTFail("a waiter was admitted into a pool that shut down")
        } catch let error as ThreadPool.Error {
            XCTAssertEqual(error, .shutDown)
        }
        blocker.open()
        try await shutdown.value
        XCTAssertFalse(pool.trySubmit {})
    }

    // MARK: the queueing-delay limit (AD5)

    func delayLimited(workers: Int, delay: Duration, depth: Int? = nil) throws -> ThreadPool {
        var c = ThreadPool.Configuration(workers: workers)
        c.maxSpareWorkers = 0
        c.queueLimit = depth
        c.queueDelayLimit = delay
        return try ThreadPool(configuration: c)
    }

    func testAPoolWhoseOldestQueuedClosureWaitedTooLongSaysNoUntilItStarts() async throws {
        let pool = try delayLimited(workers: 1, delay: .milliseconds(20))
        let blocker = Blocker()
        try blocker.occupy(pool)
        let started = DispatchSemaphore(value: 0)
        // Nothing is queued: admitted, however busy the workers are.
        XCTAssertTrue(pool.trySubmit { started.signal() })
        XCTAssertTrue(pool.trySubmit {}, "the head has not waited 20 ms yet")
        try await Task.sleep(for: .milliseconds(60))
        let admission = try XCTUnwrap(pool.admission)
        XCTAssertGreaterThanOrEqual(admission.headDelay, 60_000_000)
        XCTAssertFalse(pool.trySubmit {}, "admitted behind a closure queued for 60 ms, past a 20 ms limit")
        await assertOverloaded(pool, "past the delay limit")
        XCTAssertEqual(admission.queued, 2, "refusals took no slot")
        blocker.open()
        started.wait()
        // The queue drains at once (two empty closures); then there is room again.
        while admission.queued > 0 { try await Task.sleep(for: .milliseconds(1)) }
        XCTAssertEqual(admission.headDelay, 0)
        XCTAssertTrue(pool.trySubmit {})
        try await pool.shutdown()
    }

    func testTheHeadIsTheOldestClosureStillQueuedWhenClosuresStartOutOfOrder() async throws {
        // Two workers: the second takes closures while the first is held, so they leave
        // the queue in whatever order the workers take them; whichever order that is,
        // once all have started nothing counts as waiting.
        let pool = try delayLimited(workers: 2, delay: .seconds(10))
        let admission = try XCTUnwrap(pool.admission)
        for _ in 0..<Stress.count(2000) {
            while !pool.trySubmit({}) { try await Task.sleep(for: .milliseconds(1)) }
        }
        while admission.queued > 0 { try await Task.sleep(for: .milliseconds(1)) }
        XCTAssertEqual(admission.headDelay, 0, "a ticket that left out of order is still counted as queued")
        try await pool.shutdown()
    }

    func testWaitersPastTheDelayLimitAreAdmittedInOrderOnceTheHeadStarts() async throws {
        let pool = try delayLimited(workers: 1, delay: .milliseconds(10))
        let blocker = Blocker()
        try blocker.occupy(pool)
        XCTAssertTrue(pool.trySubmit {})
        try await Task.sleep(for: .milliseconds(30))
        let admission = try XCTUnwrap(pool.admission)
        let order = Log()
        let tasks = try await lineUp(5, on: pool, logging: order)
        blocker.open()
        for t in tasks { try await t.value }
        XCTAssertEqual(order.all, (0..<5).map(String.init))
        XCTAssertEqual(admission.queued, 0)
        try await pool.shutdown()
    }

    func testTheDelayLimitIsValidated() {
        for bad: Duration in [.zero, .milliseconds(-1), .seconds(86_401)] {
            var c = ThreadPool.Configuration(workers: 1)
            c.queueDelayLimit = bad
            XCTAssertThrowsError(try ThreadPool(configuration: c), "\(bad)") {
                guard case .invalidConfiguration(let why) = $0 as? ThreadPool.Error else { return XCTFail("\($0)") }
                XCTAssertTrue(why.contains("queueDelayLimit"), why)
            }
        }
    }
}
