import Foundation
import XCTest

@testable import Spindle

/// What a queue keeps alive, and until when: each operation, from its add until it has
/// finished. A program that waits for the queue and then finds what its operations
/// captured still alive would take it for a leak, as its tests do.
final class QueueLifetimeTests: XCTestCase {
    /// An object an operation captures, watched through a weak reference.
    private final class Captured: Sendable {}

    /// A subclass that keeps Spindle's `start()` and does its work in `main()`, as most
    /// subclasses do.
    private final class Working: Operation, @unchecked Sendable {
        // @unchecked: set before the operation is added, only read after.
        let captured: Captured
        init(_ captured: Captured) { self.captured = captured }
        override func main() { _ = captured }
    }

    /// A returning `waitUntilAllOperationsAreFinished()` means the queue has let go of
    /// every operation it held: the last one's runner, still returning from it when
    /// the finish drained the queue, releases it before the wait returns. Each way an
    /// operation is added, at the default width and narrower ones.
    func testAReturningWaitForTheQueueMeansItHoldsNoOperationAnyMore() {
        for width in [OperationQueue.defaultMaxConcurrentOperationCount, 1, 3] {
            for kind in ["the block form", "a BlockOperation", "a subclass with its own main()"] {
                let q = OperationQueue()
                q.maxConcurrentOperationCount = width
                var alive = 0
                let rounds = Stress.count(200)
                for _ in 0..<rounds {
                    let weak = Weak<Captured>()
                    do {
                        let captured = Captured()
                        weak.value = captured
                        switch kind {
                        case "the block form": q.addOperation { _ = captured }
                        case "a BlockOperation": q.addOperation(BlockOperation { _ = captured })
                        default: q.addOperation(Working(captured))
                        }
                    }
                    q.waitUntilAllOperationsAreFinished()
                    if weak.value != nil { alive += 1 }
                }
                XCTAssertEqual(alive, 0, "width \(width), \(kind): after \(alive) of \(rounds) waits, an operation was still alive")
            }
        }
    }

    /// The same when several operations finish together: the drain may find others
    /// whose runners are still returning from them, on other threads.
    func testAReturningWaitForAWideQueueMeansItHoldsNoOperationAnyMore() {
        let q = OperationQueue()
        var alive = 0
        let rounds = Stress.count(100)
        for _ in 0..<rounds {
            let weaks = (0..<8).map { _ in Weak<Captured>() }
            for weak in weaks {
                let captured = Captured()
                weak.value = captured
                q.addOperation { _ = captured }
            }
            q.waitUntilAllOperationsAreFinished()
            alive += weaks.filter { $0.value != nil }.count
        }
        XCTAssertEqual(alive, 0, "\(alive) operations were still alive after the queue's wait returned")
    }

    /// While an operation runs for long, a queue to which nothing more is added lets go
    /// of the operations that finish meanwhile, as Foundation's does, rather than when
    /// something is next added or the queue drains. Each width; for a width of two, a
    /// whole batch added behind the long operation, which then runs one at a time.
    func testAQueueToWhichNothingIsAddedLetsGoOfWhatFinishesWhileAnotherRuns() {
        for width in [OperationQueue.defaultMaxConcurrentOperationCount, 2] {
            let q = OperationQueue()
            q.maxConcurrentOperationCount = width
            let gate = DispatchSemaphore(value: 0)
            q.addOperation { gate.wait() }
            let (weaks, ran) = addShortOperations(width == 2 ? 20 : 1, to: q)
            ran.wait()
            // The release follows the finish on a worker of the pool: waited for, with a
            // deadline only a queue that never lets go reaches.
            XCTAssertTrue(eventually(within: 30) { weaks.allSatisfy { $0.value == nil } },
                          "width \(width): finished operations kept alive while the long one ran")
            XCTAssertEqual(q.operationCount, 1)
            gate.signal()
            q.waitUntilAllOperationsAreFinished()
        }
    }

    /// The same when the long operation is the newest: what finished before it, added
    /// before it or after its own end, is let go of while it runs, at every width.
    func testWhatFinishedBeforeALongOperationAddedAfterItIsLetGoOfWhileItRuns() {
        for width in [OperationQueue.defaultMaxConcurrentOperationCount, 1, 2] {
            for endFirst in [false, true] {
                let q = OperationQueue()
                q.maxConcurrentOperationCount = width
                let gate = DispatchSemaphore(value: 0)
                let (weaks, ran) = addShortOperations(5, to: q)
                if endFirst { ran.wait() }
                q.addOperation { gate.wait() }
                ran.wait()
                // Let go of by the queue's watch, within its longest delay once nothing
                // is added: waited for, with a deadline only a queue that keeps them
                // while the long one runs reaches.
                XCTAssertTrue(eventually(within: 30) { weaks.allSatisfy { $0.value == nil } },
                              "width \(width)\(endFirst ? ", added once they had finished" : ""): "
                              + "finished operations kept alive while the newest ran")
                gate.signal()
                q.waitUntilAllOperationsAreFinished()
            }
        }
    }

    /// Adds `n` operations that each capture an object, watched through the weak
    /// references returned, and leave the group returned once run.
    private func addShortOperations(_ n: Int, to q: OperationQueue) -> ([Weak<Captured>], DispatchGroup) {
        let weaks = (0..<n).map { _ in Weak<Captured>() }
        let ran = DispatchGroup()
        for weak in weaks {
            let captured = Captured()
            weak.value = captured
            ran.enter()
            q.addOperation { _ = captured; ran.leave() }
        }
        return (weaks, ran)
    }

    /// The watch stops once nothing runs: an idle queue, or one whose operations wait,
    /// suspended, wakes no thread. Nor does a serial queue whose one operation runs on
    /// with nothing finished left to let go of: each of its finishes arms the watch
    /// again.
    func testTheWatchStopsWhenNothingRuns() {
        let serial = OperationQueue()
        serial.maxConcurrentOperationCount = 1
        let gate = DispatchSemaphore(value: 0)
        let (weaks, ran) = addShortOperations(3, to: serial)
        serial.addOperation { gate.wait() }
        ran.wait()
        XCTAssertTrue(eventually(within: 30) { weaks.allSatisfy { $0.value == nil } }, "finished operations kept")
        XCTAssertTrue(eventually(within: 30) { unsafe serial.state.locked { unsafe $0.watch } == nil },
                      "the watch ticks on while a serial queue's one operation runs")
        gate.signal()
        serial.waitUntilAllOperationsAreFinished()

        let q = OperationQueue()
        for _ in 0..<4 { q.addOperation {} }
        q.waitUntilAllOperationsAreFinished()
        XCTAssertTrue(eventually(within: 30) { unsafe q.state.locked { unsafe $0.watch } == nil }, "the watch ticks on after the queue drained")
        q.isSuspended = true
        for _ in 0..<4 { q.addOperation {} }
        XCTAssertTrue(eventually(within: 30) { unsafe q.state.locked { unsafe $0.watch } == nil }, "the watch ticks on while the queue is suspended")
        q.isSuspended = false
        q.waitUntilAllOperationsAreFinished()
    }
}
