import Foundation
import XCTest

@testable import Spindle

/// What a queue keeps alive, and until when: each operation, from its add until it has
/// finished. A program that waits for the queue and then finds what its operations
/// captured still alive would take it for a leak, as its tests do.
final class QueueLifetimeTests: XCTestCase {
    /// An object an operation captures, which says when it is freed.
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
}
