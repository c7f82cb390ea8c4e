import XCTest

@testable import Spindle

/// The order in which a queue starts its ready operations, as Foundation's does: by
/// priority, then in the order they were added, whenever each became ready. Each queue
/// is serial and suspended while it is filled, so the order never depends on timing.
/// (Tests/FoundationDiff's order scenarios run the same shapes, and random programs of
/// them, against Foundation itself.)
final class QueueOrderTests: XCTestCase {
    /// A suspended serial queue, filled by `build`, then resumed: the order its
    /// operations ran in.
    private func runSuspended(_ build: (OperationQueue, Log) -> Void) -> [String] {
        let q = OperationQueue()
        q.maxConcurrentOperationCount = 1
        q.isSuspended = true
        let log = Log()
        build(q, log)
        q.isSuspended = false
        q.waitUntilAllOperationsAreFinished()
        return log.all
    }

    private func op(_ name: String, _ log: Log, _ priority: Operation.QueuePriority = .normal) -> BlockOperation {
        let op = BlockOperation { log.add(name) }
        op.queuePriority = priority
        return op
    }

    /// Foundation's rule: among the ready operations of the highest priority, the one
    /// added first starts, even when it became ready after ones added behind it.
    func testAnOperationThatBecomesReadyLateStillStartsInTheOrderItWasAdded() {
        let order = runSuspended { q, log in
            let x = op("x", log), b = op("b", log), c = op("c", log), d = op("d", log)
            b.addDependency(x)
            q.addOperations([x, b, c, d], waitUntilFinished: false)
        }
        XCTAssertEqual(order, ["x", "b", "c", "d"])
    }

    /// The dependents one finish makes ready start in the order they were added, in
    /// every round: not in the order of the finishing operation's table of dependents,
    /// which follows their addresses.
    func testTheDependentsOfOneFinishStartInTheOrderTheyWereAdded() {
        for _ in 0..<20 {
            let order = runSuspended { q, log in
                let root = op("root", log)
                let dependents = (0..<32).map { op("\($0)", log) }
                for d in dependents { d.addDependency(root) }
                q.addOperations(dependents + [root], waitUntilFinished: false)
            }
            XCTAssertEqual(order, ["root"] + (0..<32).map { "\($0)" })
        }
    }

    /// Late arrivals at several levels at once, among operations ready from the start.
    func testLateArrivalsKeepTheirPlaceAtEachLevel() {
        let order = runSuspended { q, log in
            let gate = op("gate", log, .veryHigh)
            let specs: [(String, Operation.QueuePriority, Bool)] = [
                ("h1", .high, true), ("n1", .normal, true), ("h2", .high, false), ("n2", .normal, false),
                ("h3", .high, true), ("n3", .normal, false), ("n4", .normal, true), ("h4", .high, false),
            ]
            var ops: [Operation] = [gate]
            for (name, priority, waits) in specs {
                let o = op(name, log, priority)
                if waits { o.addDependency(gate) }
                ops.append(o)
            }
            q.addOperations(ops, waitUntilFinished: false)
        }
        XCTAssertEqual(order, ["gate", "h1", "h2", "h3", "h4", "n1", "n2", "n3", "n4"])
    }

    /// A change of priority moves an operation to the end of its new level, as in
    /// Foundation, whether it waits ready or not; one that leaves it on its level
    /// moves nothing.
    func testAChangeOfPriorityMovesAnOperationToTheEndOfItsNewLevel() {
        let ready = runSuspended { q, log in
            let a = op("a", log), b = op("b", log), c = op("c", log)
            q.addOperations([a, b, c], waitUntilFinished: false)
            a.queuePriority = .high
            a.queuePriority = .normal
            b.queuePriority = .normal
        }
        XCTAssertEqual(ready, ["b", "c", "a"])
        let waiting = runSuspended { q, log in
            let x = op("x", log, .veryHigh), a = op("a", log), b = op("b", log)
            a.addDependency(x)
            q.addOperations([x, a, b], waitUntilFinished: false)
            a.queuePriority = .low
            a.queuePriority = .normal
        }
        XCTAssertEqual(waiting, ["x", "b", "a"])
    }

    /// An operation's level is decided when it is added, as Foundation decides it: one
    /// with a class and no priority, added while the queue is not serial, keeps the
    /// level its class gave it after the queue is made serial, even when it becomes
    /// ready only then.
    func testALevelIsDecidedWhenTheOperationIsAdded() {
        let q = OperationQueue()
        q.isSuspended = true
        let log = Log()
        let x = op("x", log, .veryHigh), b = op("b", log)
        let a = BlockOperation { log.add("a") }
        a.qualityOfService = .userInitiated
        a.addDependency(x)
        q.addOperations([x, b, a], waitUntilFinished: false)
        q.maxConcurrentOperationCount = 1
        q.isSuspended = false
        q.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(log.all, ["x", "a", "b"])
    }

    /// A barrier waits on a level above every priority, as in Foundation: it starts
    /// ahead of a cancelled operation added after it, which is ready at once.
    func testABarrierStartsAheadOfACancelledOperationAddedAfterIt() {
        let order = runSuspended { q, log in
            q.addOperation(op("z", log, .high))
            q.addBarrierBlock { log.add("B") }
            let a = op("a", log, .high), c = op("c", log, .high), d = op("d", log, .veryHigh)
            d.addDependency(c)
            q.addOperations([a, c, d], waitUntilFinished: false)
            c.cancel()
        }
        XCTAssertEqual(order, ["z", "B", "a", "d"])
    }
}
