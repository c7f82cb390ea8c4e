import Foundation
import Synchronization
import XCTest

@testable import Spindle

/// Dependents are referenced without retaining them (Operations/Internals/Dependents.swift):
/// these tests go after the ways that could touch freed memory or go quadratic.
final class DependencyEdgeTests: XCTestCase {
    /// `dependencies` lists them in the order added, whichever are removed, as
    /// Foundation's does; the first is kept apart from the others internally.
    func testDependenciesKeepTheirOrderAsTheyAreAddedAndRemoved() {
        let op = BlockOperation {}
        let (a, b, c) = (BlockOperation {}, BlockOperation {}, BlockOperation {})
        for d in [a, b, c] { op.addDependency(d) }
        op.addDependency(b) // a second add of the same dependency adds nothing
        XCTAssertEqual(op.dependencies, [a, b, c])
        op.removeDependency(a)
        XCTAssertEqual(op.dependencies, [b, c])
        op.removeDependency(c)
        XCTAssertEqual(op.dependencies, [b])
        op.addDependency(a)
        XCTAssertEqual(op.dependencies, [b, a])
        op.removeDependency(b)
        op.removeDependency(a)
        XCTAssertEqual(op.dependencies, [])
        XCTAssertTrue(op.isReady, "every edge removed: ready")
        op.addDependency(c)
        XCTAssertFalse(op.isReady)
        c.start()
        XCTAssertTrue(op.isReady)
    }

    func testDependentsDroppedBeforeTheirDependencyFinishes() {
        let a = BlockOperation {}
        for _ in 0..<1000 {
            let b = BlockOperation {}
            b.addDependency(a) // b is released at the end of each turn, a still pending
        }
        let survivor = BlockOperation {}
        survivor.addDependency(a)
        a.start() // must touch only the survivor
        XCTAssertTrue(survivor.isReady)
    }

    func testWideFanOutCancelledEnMasseStaysLinear() {
        // 50 000 queued operations waiting for one gate, all cancelled: each finishes,
        // is released and leaves the gate's dependents; then the gate finishes.
        let n = Stress.count(50_000)
        let gate = BlockOperation {}
        let q = OperationQueue()
        let completed = Atomic<Int>(0)
        for _ in 0..<n {
            let op = BlockOperation {}
            op.addDependency(gate)
            op.completionBlock = { completed.add(1, ordering: .relaxed) }
            q.addOperation(op)
        }
        let start = Date()
        q.cancelAllOperations()
        q.waitUntilAllOperationsAreFinished()
        XCTAssertTrue(eventually { completed.load(ordering: .acquiring) == n })
        gate.start()
        // Quadratic removal would take minutes at this size; linear takes well under one.
        XCTAssertLessThan(Date().timeIntervalSince(start), 30)
    }

    func testDependentReleasedWhileItsDependencyFinishesOnAnotherThread() {
        // The race the design argues about: the last reference to a dependent goes away
        // on one thread while its dependency finishes on another. Run under TSan in CI.
        for _ in 0..<Stress.count(2_000) {
            let a = BlockOperation {}
            var b: BlockOperation? = BlockOperation {}
            b!.addDependency(a)
            let go = Atomic<Int>(0)
            let box = UncheckedBox(a)
            let t = Thread {
                go.add(1, ordering: .acquiringAndReleasing)
                // Yielding: on a busy machine the other side may be waiting for this CPU.
                while go.load(ordering: .acquiring) < 2 { sched_yield() }
                box.value.start()
            }
            t.start()
            while go.load(ordering: .acquiring) < 1 { sched_yield() }
            go.add(1, ordering: .acquiringAndReleasing)
            b = nil
            a.waitUntilFinished()
            XCTAssertNil(b)
        }
    }

    /// When its last dependency finishes, a subclass hears `isReady` change through
    /// `willChangeValue(forKey:)` and `didChangeValue(forKey:)`, as Foundation's KVO
    /// announces it, and its queue starts it. A plain operation, which overrides
    /// neither, is told through `onStateChange` and started all the same.
    func testALastDependencyFinishingAnnouncesReadinessToSubclassesAndObservers() {
        final class Announcing: Operation, @unchecked Sendable {
            let keys = Log()
            override func willChangeValue(forKey key: String) {
                keys.add("will \(key)")
                super.willChangeValue(forKey: key)
            }
            override func didChangeValue(forKey key: String) {
                keys.add("did \(key)")
                super.didChangeValue(forKey: key)
            }
        }
        let q = OperationQueue()
        let gate = BlockOperation {}
        let sub = Announcing()
        let plain = BlockOperation {}
        let heard = Log()
        plain.onStateChange { heard.add("\($0)") }
        sub.addDependency(gate)
        plain.addDependency(gate)
        q.addOperations([sub, plain], waitUntilFinished: false)
        let before = sub.keys.all.count
        XCTAssertFalse(sub.isReady)
        XCTAssertFalse(plain.isReady)
        gate.start() // in no queue: its finish tells both dependents on this thread
        XCTAssertTrue(eventually { sub.isFinished && plain.isFinished }, "both started once the gate finished")
        XCTAssertEqual(Array(sub.keys.all.dropFirst(before).prefix(2)), ["will isReady", "did isReady"])
        XCTAssertEqual(heard.all, ["ready", "executing", "finished"])
    }

    func testQueuedDependentsOfAWideFanOutAllRun() {
        let n = 5_000
        let gate = BlockOperation { usleep(5_000) }
        let q = OperationQueue()
        let ran = Atomic<Int>(0)
        for _ in 0..<n {
            let op = BlockOperation { ran.add(1, ordering: .relaxed) }
            op.addDependency(gate)
            q.addOperation(op)
        }
        q.addOperation(gate)
        q.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(ran.load(ordering: .relaxed), n)
    }
}
