import Foundation
import Synchronization
import XCTest

@testable import Spindle

/// A queue lets an operation go — its drain or a prune takes it off the queue's list —
/// while another thread is on its way to tell the queue something about that operation.
/// What arrives late must find it gone (QueueRegistry.swift).
final class QueueReleaseRaceTests: XCTestCase {
    /// An operation that finishes without being started (it announces `isFinished`
    /// itself, as code built on a state machine of its own does) is retired by its
    /// queue, which then drains and lets it go. A readiness signal already on its way —
    /// its dependency finished on another thread — arrives after that, while the queue
    /// is suspended. Taken as the operation's one signal, it would put the operation on
    /// a ready line, which holds operations unretained while the list keeps them: a
    /// line holding one the list has let go would read freed memory once the program
    /// drops its own reference.
    func testAReadinessSignalThatArrivesAfterTheQueueLetTheOperationGoDoesNothing() {
        let q = OperationQueue()
        q.maxConcurrentOperationCount = 1
        let dependency = BlockOperation {}
        let op = FinishesOnItsOwn()
        op.addDependency(dependency)
        q.addOperation(op)
        let key = Dependents.key(op)

        let stopped = DispatchSemaphore(value: 0), resume = DispatchSemaphore(value: 0)
        let stops = Atomic<Int>(0)
        OperationSeams.install { point, reached in
            guard point == .signallingReady, reached == key,
                  stops.add(1, ordering: .relaxed).newValue == 1 else { return }
            stopped.signal()
            resume.wait()
        }
        defer { OperationSeams.remove() }

        // The dependency's finish makes the operation ready, and stops on its way to
        // the queue.
        let signalReturned = DispatchSemaphore(value: 0)
        let box = UncheckedBox(dependency)
        Thread {
            box.value.start()
            signalReturned.signal()
        }.start()
        guard stopped.wait(timeout: .now() + 60) == .success else {
            resume.signal()
            return XCTFail("the dependency's finish never reached the readiness signal")
        }
        // Meanwhile the operation finishes without starting, and the queue, which holds
        // nothing else, drains and lets it go.
        op.finishWithoutStarting()
        q.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(q.operationCount, 0)

        // Suspended, the queue puts what it takes as ready on its ready lines.
        q.isSuspended = true
        resume.signal()
        XCTAssertEqual(signalReturned.wait(timeout: .now() + 60), .success, "the readiness signal never returned")
        XCTAssertFalse(op.queueSync.readySignalled.load(ordering: .acquiring),
                       "the queue took a late signal for an operation it had let go")
        XCTAssertFalse(unsafe op.queueFields.inRing, "a ready line holds an operation the queue's list let go")
        XCTAssertEqual(q.operationCount, 0)
        q.isSuspended = false
        // The queue still starts what is added to it.
        let ran = DispatchSemaphore(value: 0)
        q.addOperation { ran.signal() }
        XCTAssertEqual(ran.wait(timeout: .now() + 60), .success,
                       "the serial queue started nothing after a late signal for an operation it had let go")
        q.waitUntilAllOperationsAreFinished()
    }
}
