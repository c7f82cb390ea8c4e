import CSpindle
import Foundation
import Synchronization
import XCTest

@testable import Spindle

/// Misuse that Foundation treats as a programmer error must trap, with a message that
/// names the misuse. A trap ends the process, so each case runs in a child process:
/// this same test binary, asked (through SPINDLE_MISUSE) to run `MisuseProbe` only.
final class MisuseTests: XCTestCase {
    func expectTrap(_ name: String, message: String, file: StaticString = #filePath, line: UInt = #line) throws {
        var env = ProcessInfo.processInfo.environment
        env["SPINDLE_MISUSE"] = name
        env["SWIFT_BACKTRACE"] = "enable=no"
        let (status, out) = try runChild(CommandLine.arguments[0], ["SpindleTests.MisuseProbe/testProbe"], environment: env)
        XCTAssertNotEqual(status, 0, "\(name): the misuse did not trap", file: file, line: line)
        XCTAssertTrue(out.contains(message), "\(name): trap message should contain '\(message)'; got:\n\(out.suffix(600))", file: file, line: line)
        XCTAssertFalse(out.contains("PROBE-SURVIVED"), "\(name): the probe went on after the misuse", file: file, line: line)
    }

    func testStartWhenNotReady() throws { try expectTrap("start-not-ready", message: "which is not ready") }
    func testStartWhileExecuting() throws { try expectTrap("start-executing", message: "is already executing") }
    func testStartOfAQueuedOperation() throws { try expectTrap("start-queued", message: "belongs to an OperationQueue") }
    func testAddingTwice() throws { try expectTrap("add-twice", message: "is already in an operation queue") }
    func testAddingToAnotherQueue() throws { try expectTrap("add-other-queue", message: "is already in an operation queue") }
    func testAddingAFinishedOperation() throws { try expectTrap("add-finished", message: "has already finished") }
    func testAddingAnExecutingOperation() throws { try expectTrap("add-executing", message: "is executing") }
    func testExecutionBlockAfterStart() throws { try expectTrap("block-after-start", message: "addExecutionBlock was called") }
    func testWaitingOnItself() throws { try expectTrap("wait-self", message: "from inside") }
    func testStartingAnAsyncOperationTwice() throws { try expectTrap("async-start-twice", message: "is already executing") }
    func testAnAdmissionLimitBelowOne() throws { try expectTrap("admission-limit-zero", message: "admissionLimit must be at least 1") }
    /// Named by a fatalError, whose message release builds keep (a precondition's they drop).
    func testAWidthBelowMinusOne() throws {
        try expectTrap("width-minus-five", message: "maxConcurrentOperationCount must be -1 (the default) or >= 0, got -5")
    }
    func testATaskNodeFreedTwice() throws { try expectTrap("task-node-double-free", message: "freed twice") }
    /// The Swift fork-join's guard against a closure whose context a thief could no
    /// longer call: the join must be handed the closure the fork published.
    func testAJoinHandedAnotherClosureThanItsFork() throws {
        try expectTrap("swift-join-other-closure", message: "is not the one spindle_swift_fork published")
    }
}

/// Forks `offered` and joins with `other`: both stay alive for the whole call, so a
/// worker that steals the fork still calls a live closure.
private func forkThenJoinAnother(_ pool: ThreadPool, _ offered: () -> Void, _ other: () -> Void) {
    var frame = spindle_join_frame()
    withUnsafeMutablePointer(to: &frame) { frame in
        _spindleSwiftFork(pool.raw, frame, offered)
        _ = _spindleSwiftJoin(pool.raw, frame, other)
    }
}

/// The child side of ``MisuseTests``: does nothing unless SPINDLE_MISUSE is set.
final class MisuseProbe: XCTestCase {
    func testProbe() throws {
        guard let which = ProcessInfo.processInfo.environment["SPINDLE_MISUSE"] else {
            throw XCTSkip("runs only as MisuseTests' child process")
        }
        let q = OperationQueue()
        switch which {
        case "start-not-ready":
            let op = BlockOperation {}
            op.addDependency(BlockOperation {})
            op.start()
        case "swift-join-other-closure":
            let pool = try ThreadPool(workers: 1)
            let counter = Atomic<Int>(0)
            forkThenJoinAnother(pool, { counter.add(1, ordering: .relaxed) }, { counter.add(2, ordering: .relaxed) })
        case "task-node-double-free":
            let node = spindle_task_alloc(40)
            spindle_task_free(node)
            spindle_task_free(node)
        case "admission-limit-zero":
            q.admissionLimit = 0
        case "width-minus-five":
            q.maxConcurrentOperationCount = -5
        case "async-start-twice":
            let op = AsyncBlockOperation { try? await Task.sleep(for: .seconds(30)) }
            op.start()
            op.start()
        case "start-executing":
            let box = Mutex<Operation?>(nil)
            let op = BlockOperation { box.locked { $0 }!.start() }
            box.locked { $0 = op }
            op.start()
        case "start-queued":
            q.isSuspended = true
            let op = BlockOperation {}
            q.addOperation(op)
            op.start()
        case "add-twice":
            q.isSuspended = true
            let op = BlockOperation {}
            q.addOperation(op)
            q.addOperation(op)
        case "add-other-queue":
            q.isSuspended = true
            let op = BlockOperation {}
            q.addOperation(op)
            OperationQueue().addOperation(op)
        case "add-finished":
            let op = BlockOperation {}
            op.start()
            q.addOperation(op)
        case "add-executing":
            // A manually started operation adds itself to a queue while it runs.
            let box = Mutex<Operation?>(nil)
            let op = BlockOperation { q.addOperation(box.locked { $0 }!) }
            box.locked { $0 = op }
            op.start()
        case "block-after-start":
            let box = Mutex<BlockOperation?>(nil)
            let op = BlockOperation { box.locked { $0 }!.addExecutionBlock {} }
            box.locked { $0 = op }
            op.start()
        case "wait-self":
            let box = Mutex<Operation?>(nil)
            let op = BlockOperation { box.locked { $0 }!.waitUntilFinished() }
            box.locked { $0 = op }
            q.addOperation(op)
            op.waitUntilFinished()
        default:
            XCTFail("unknown probe \(which)")
        }
        print("PROBE-SURVIVED")
    }
}
