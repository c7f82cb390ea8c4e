import Foundation
import Synchronization
import XCTest

@testable import Spindle

/// An OperationQueue with an admission limit (Operations/Internals/QueueAdmission.swift,
/// QA1-QA4).
final class QueueAdmissionTests: XCTestCase {
    /// A serial queue whose one operation is held running until `open()`.
    func heldQueue(limit: Int) -> (OperationQueue, Blocker) {
        let q = OperationQueue()
        q.maxConcurrentOperationCount = 1
        q.admissionLimit = limit
        let blocker = Blocker()
        q.addOperation { blocker.started.signal(); blocker.release.wait() }
        blocker.started.wait()
        return (q, blocker)
    }

    func testAFullQueueRefusesWhatMayBeRefusedAndNothingElse() async throws {
        let (q, blocker) = heldQueue(limit: 2) // the running operation counts
        XCTAssertTrue(q.tryAddOperation(BlockOperation {}))
        let refused = BlockOperation {}
        XCTAssertFalse(q.tryAddOperation(refused), "a third operation was admitted past a limit of 2")
        XCTAssertFalse(refused.isFinished || refused.isExecuting || refused.isCancelled, "a refused operation was touched")
        do {
            _ = try await q.run(ifFull: .fail) { 1 }
            XCTFail("a fail-fast run was admitted past the limit")
        } catch let error as ThreadPool.Error {
            XCTAssertEqual(error, .overloaded)
        }
        // Foundation's addOperation is never refused, and counts.
        q.addOperation {}
        XCTAssertEqual(q.operationCount, 3)
        blocker.open()
        q.waitUntilAllOperationsAreFinished()
        XCTAssertTrue(q.tryAddOperation(refused), "room again once the queue drained")
        q.waitUntilAllOperationsAreFinished()
        XCTAssertTrue(refused.isFinished)
    }

    func testWaitingTasksAreAdmittedFirstComeFirstServedAsOperationsFinish() async throws {
        let (q, blocker) = heldQueue(limit: 1)
        let order = Log()
        var tasks: [Task<Void, any Error>] = []
        for i in 0..<10 {
            tasks.append(Task { try await q.run { order.add("\(i)") } })
            while q.admission.waiting < i + 1 { try await Task.sleep(for: .milliseconds(1)) }
        }
        XCTAssertFalse(q.tryAddOperation(BlockOperation {}), "a newcomer went ahead of the line")
        blocker.open()
        for t in tasks { try await t.value }
        XCTAssertEqual(order.all, (0..<10).map(String.init))
        XCTAssertEqual(q.admission.waiting, 0)
    }

    func testACancelledWaiterLeavesTheLineAndItsBodyNeverRuns() async throws {
        let (q, blocker) = heldQueue(limit: 1)
        let ran = Log()
        let a = Task { try await q.run { ran.add("a") } }
        while q.admission.waiting < 1 { try await Task.sleep(for: .milliseconds(1)) }
        let b = Task { try await q.run { ran.add("b") } }
        while q.admission.waiting < 2 { try await Task.sleep(for: .milliseconds(1)) }
        a.cancel()
        await assertEndsCancelled(a, "a cancelled waiter was admitted")
        blocker.open()
        try await b.value
        XCTAssertEqual(ran.all, ["b"])
    }

    func testRaisingOrRemovingTheLimitLetsWaitersIn() async throws {
        let (q, blocker) = heldQueue(limit: 1)
        let done = Log()
        let tasks = (0..<3).map { i in Task { try await q.run { done.add("\(i)") } } }
        while q.admission.waiting < 3 { try await Task.sleep(for: .milliseconds(1)) }
        q.admissionLimit = 3 // room for two more
        while q.admission.waiting > 1 || q.operationCount < 3 { try await Task.sleep(for: .milliseconds(1)) }
        try await Task.sleep(for: .milliseconds(20))
        XCTAssertEqual(q.operationCount, 3, "admitted past the raised limit")
        XCTAssertEqual(q.admission.waiting, 1)
        q.admissionLimit = nil
        XCTAssertEqual(q.admission.waiting, 0)
        blocker.open()
        for t in tasks { try await t.value }
        XCTAssertEqual(done.all.count, 3)
    }

    func testAFloodFromManyTasksNeverHoldsMoreThanTheLimit() async throws {
        let q = OperationQueue()
        let limit = 8
        q.admissionLimit = limit
        let peak = MaxTracker()
        q.onOperationCountChange { peak.see($0) }
        let n = Stress.count(2000)
        let sum = try await withThrowingTaskGroup(of: Int.self) { group in
            for i in 0..<n {
                group.addTask {
                    let value = try await q.run { i }
                    if i % 7 == 0 {
                        // Some are refused rather than wait; they retry by waiting.
                        _ = q.tryAddOperation(BlockOperation {})
                    }
                    return value
                }
            }
            return try await group.reduce(0, +)
        }
        XCTAssertEqual(sum, n * (n - 1) / 2, "a run was lost or ran twice")
        q.waitUntilAllOperationsAreFinished()
        XCTAssertLessThanOrEqual(peak.max, limit)
        XCTAssertEqual(q.admission.waiting, 0)
    }

    func testAtALimitOfOneEveryWaiterIsAdmittedEvenWhenOperationsFinishBeforeTheyAreCounted() async throws {
        // Empty bodies on a wide queue: an admitted operation often finishes before its
        // submitter has dropped its reservation, and the room it leaves must still
        // reach the next waiter (QA1).
        let q = OperationQueue()
        q.admissionLimit = 1
        let n = Stress.count(1000)
        let sum = try await withThrowingTaskGroup(of: Int.self) { group in
            for t in 0..<20 {
                group.addTask {
                    var s = 0
                    for i in stride(from: t, to: n, by: 20) { s += try await q.run { i } }
                    return s
                }
            }
            return try await group.reduce(0, +)
        }
        XCTAssertEqual(sum, n * (n - 1) / 2)
    }

    func testWithoutALimitNothingIsRefused() async throws {
        let q = OperationQueue()
        q.isSuspended = true
        for _ in 0..<100 { XCTAssertTrue(q.tryAddOperation(BlockOperation {})) }
        let sum = try await withThrowingTaskGroup(of: Int.self) { group in
            q.isSuspended = false
            for i in 0..<50 { group.addTask { try await q.run(ifFull: .fail) { i } } }
            return try await group.reduce(0, +)
        }
        XCTAssertEqual(sum, 50 * 49 / 2)
    }

    func testAQueueWithALimitIsStillReleasedWhenTheProgramDropsIt() async throws {
        weak var weakQueue: OperationQueue?
        do {
            let q = OperationQueue()
            q.admissionLimit = 4
            _ = try await q.run { 1 }
            weakQueue = q
        }
        for _ in 0..<200 where weakQueue != nil { try await Task.sleep(for: .milliseconds(5)) }
        XCTAssertNil(weakQueue, "the count observer keeps the queue alive")
    }
}
