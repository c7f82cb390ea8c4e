import Foundation
import Synchronization
import XCTest

@testable import Spindle

/// Dependents are referenced without retaining them (Operations/Internals/Dependents.swift):
/// these tests go after the ways that could touch freed memory or go quadratic.
final class DependencyEdgeTests: XCTestCase {
    /// A finished operation given an unfinished dependency is not ready until that
    /// dependency finishes, as with Foundation: the dependency's finish passes a
    /// finished dependent over without counting it down, and `isReady` then looks at
    /// the dependencies themselves.
    func testAFinishedOperationGivenADependencyIsReadyOnceItFinishes() {
        let done = BlockOperation {}
        done.start()
        let gate = DispatchSemaphore(value: 0), started = DispatchSemaphore(value: 0)
        let running = BlockOperation { started.signal(); gate.wait() }
        let q = OperationQueue()
        q.addOperation(running)
        started.wait()
        done.addDependency(running)
        XCTAssertFalse(done.isReady)
        gate.signal()
        running.waitUntilFinished()
        XCTAssertTrue(done.isReady)
        XCTAssertTrue(done.isFinished)
    }

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

    /// A dependent cancelled while its last dependency is counting it down is not let go
    /// until that count-down is done with it. A cancelled operation is ready whatever its
    /// dependencies, so it can start, finish and be let go by its queue while its
    /// dependency is still finishing. The dependency's thread is stopped (a debug-build
    /// seam) where it has found the dependent ready and is about to retain it; meanwhile
    /// another thread cancels the dependent, waits for it, drains its queue and drops the
    /// last other reference. The dependent's finish must wait for the count-down: were it
    /// to complete, the dependent's deinit would begin, and the retain that follows would
    /// be of an object being freed ("deallocated with non-zero retain count").
    func testACancelledDependentOutlivesTheCountDownThatFoundItReady() {
        final class Dependent: Operation, @unchecked Sendable {
            let onDeinit: @Sendable () -> Void
            init(onDeinit: @escaping @Sendable () -> Void) {
                self.onDeinit = onDeinit
                super.init()
            }
            deinit { onDeinit() }
        }
        enum Event: Equatable { case finishLock, deinitialised }
        let events = Mutex<[Event]>([])
        let progress = DispatchSemaphore(value: 0)
        let stopped = DispatchSemaphore(value: 0), resume = DispatchSemaphore(value: 0)
        let released = DispatchSemaphore(value: 0)

        let dependency = BlockOperation {}
        var dependent: Dependent? = Dependent {
            events.locked { $0.append(.deinitialised) }
            progress.signal()
        }
        let key = UInt(bitPattern: Unmanaged.passUnretained(dependent!).toOpaque())
        dependent!.addDependency(dependency)
        let dependentQueue = OperationQueue(), dependencyQueue = OperationQueue()
        dependentQueue.addOperation(dependent!)

        let stops = Atomic<Int>(0)
        OperationSeams.install { point, op in
            guard op == key else { return }
            switch point {
            case .retainingReadyDependent:
                guard stops.add(1, ordering: .relaxed).newValue == 1 else { return }
                stopped.signal()
                resume.wait()
            case .finishLock:
                events.locked { $0.append(.finishLock) }
                progress.signal()
            case .countingDown, .signallingReady, .registering, .behindBarrier, .barrierEdges:
                break
            }
        }
        defer { OperationSeams.remove() }

        dependencyQueue.addOperation(dependency)
        guard stopped.wait(timeout: .now() + 60) == .success else {
            return XCTFail("the dependency never reached the retain of its ready dependent")
        }
        // It decides and retains under the dependent's lock, which the dependent's own
        // finish passes through: so the finish cannot complete in between.
        guard dependent!.guarded.withLockIfAvailable({ _ in true }) == nil else {
            resume.signal()
            return XCTFail("the count-down decides to retain its dependent outside the dependent's lock")
        }
        // The dependency's thread is stopped before the retain, holding the dependency's
        // lock. Hand the dependent's last reference outside its queue to a thread that
        // lets it go. It polls instead of waiting: a wait would promote what the
        // dependent waits for, and block on that lock.
        let holder = Mutex<Dependent?>(dependent)
        dependent = nil
        Thread {
            if let op = holder.locked({ $0 }) {
                op.cancel()
                _ = eventually { op.isFinished }
            }
            holder.locked { $0 = nil }
            _ = eventually { dependentQueue.operationCount == 0 }
            released.signal()
        }.start()

        // Either the dependent's finish reaches its lock, where it waits for the
        // count-down, or (the defect) it completes and the dependent is freed.
        guard progress.wait(timeout: .now() + 60) == .success else {
            return XCTFail("the cancelled dependent neither reached its finish nor was freed")
        }
        guard events.locked({ $0.first }) == .finishLock else {
            // The stopped thread is left stopped: resumed, it would retain a freed object.
            return XCTFail("the dependent was freed while its dependency was about to retain it")
        }
        XCTAssertFalse(dependency.finishCompleted.load(ordering: .acquiring), "the dependency is still at its count-down")
        resume.signal()
        XCTAssertEqual(released.wait(timeout: .now() + 60), .success, "the cancelled dependent finishes")
        XCTAssertEqual(progress.wait(timeout: .now() + 60), .success, "and is freed once its dependency is done with it")
        XCTAssertEqual(events.locked { $0 }, [.finishLock, .deinitialised])
        dependencyQueue.waitUntilAllOperationsAreFinished()
        XCTAssertTrue(dependency.isFinished)
    }

    /// A dependency cycle whose operations are cancelled on several threads at once
    /// finishes: each finishing operation holds its own lock while it counts down its
    /// dependents, so two of them taking each other's locks would deadlock (which the
    /// kernel reports for the futex under Synchronization's Mutex, and Swift traps on).
    func testADependencyCycleCancelledOnSeveralThreadsAtOnceFinishes() {
        for round in 0..<Stress.count(2_000) {
            let q = OperationQueue()
            let ops = (0..<(2 + round % 2)).map { _ in BlockOperation {} }
            for (i, op) in ops.enumerated() { op.addDependency(ops[(i + 1) % ops.count]) }
            q.addOperations(ops, waitUntilFinished: false)
            let threads = ops.dropFirst().map { op in Thread { op.cancel() } }
            for t in threads { t.start() }
            ops[0].cancel()
            let drained = DispatchSemaphore(value: 0)
            Thread {
                q.waitUntilAllOperationsAreFinished()
                drained.signal()
            }.start()
            guard drained.wait(timeout: .now() + 60) == .success else {
                return XCTFail("a cycle of \(ops.count) cancelled at once did not finish (round \(round))")
            }
            // Cancelling one breaks the cycle: the others may run before their own
            // cancellation arrives.
            XCTAssertTrue(ops.allSatisfy { $0.isFinished })
        }
    }

    /// Two operations of a dependency cycle finishing at once: the first, holding its own
    /// lock, is stopped (a debug-build seam) just before it takes the second's lock to
    /// count it down; then the second is cancelled and started. The second must not
    /// count down the first, which has begun to finish: that would wait for the first's
    /// lock while the first waits for its own, a deadlock.
    func testAnOperationDoesNotCountDownADependentThatHasBegunToFinish() {
        let a = BlockOperation {}, b = BlockOperation {}
        a.addDependency(b)
        b.addDependency(a)
        let keyA = UInt(bitPattern: Unmanaged.passUnretained(a).toOpaque())
        let keyB = UInt(bitPattern: Unmanaged.passUnretained(b).toOpaque())
        let stopped = DispatchSemaphore(value: 0), resume = DispatchSemaphore(value: 0)
        let progress = DispatchSemaphore(value: 0)
        let countedDownA = Atomic<Bool>(false)
        OperationSeams.install { point, op in
            guard point == .countingDown else { return }
            if op == keyB {
                stopped.signal()
                resume.wait()
            } else if op == keyA {
                countedDownA.store(true, ordering: .releasing)
                progress.signal()
            }
        }
        defer { OperationSeams.remove() }
        // Not in a queue, so that a thread left stopped stops nothing else.
        let boxA = UncheckedBox(a), boxB = UncheckedBox(b)
        a.cancel()
        Thread { boxA.value.start() }.start()
        guard stopped.wait(timeout: .now() + 60) == .success else {
            return XCTFail("the first operation's finish never reached its dependent")
        }
        b.cancel()
        Thread {
            boxB.value.start()
            progress.signal()
        }.start()
        guard progress.wait(timeout: .now() + 60) == .success else {
            return XCTFail("the second operation's finish neither ended nor reached the first")
        }
        guard !countedDownA.load(ordering: .acquiring) else {
            // Both threads are left as they are: resumed, they would deadlock.
            return XCTFail("an operation's finish counted down a dependent that had begun to finish")
        }
        XCTAssertTrue(b.isFinished)
        resume.signal()
        a.waitUntilFinished()
        XCTAssertTrue(a.isFinished)
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

    /// A plain operation whose last dependency finishes is signalled ready without its
    /// readiness being read again (Readiness.swift, R8). A dependency added between the
    /// count-down and the signal is found when the queue takes the operation: it is
    /// passed over, unsignalled, and runs once that dependency has finished. Both ways a
    /// queue takes a signalled operation: at once, at the default width, and off its
    /// ready line, on a serial queue.
    func testADependencyAddedBetweenTheLastCountDownAndTheSignalHoldsTheOperation() {
        for width in [OperationQueue.defaultMaxConcurrentOperationCount, 1] {
            let q = OperationQueue()
            q.maxConcurrentOperationCount = width
            let first = BlockOperation {}, second = BlockOperation {}
            let ranAfterSecond = Atomic<Int>(0)
            let op = BlockOperation {
                ranAfterSecond.store(second.isFinished ? 1 : 2, ordering: .relaxed)
            }
            op.addDependency(first)
            q.addOperation(op)
            let key = Dependents.key(op)
            let added = Atomic<Bool>(false)
            let box = UncheckedBox(op), secondBox = UncheckedBox(second)
            OperationSeams.install { point, reached in
                // On the first dependency's thread, after the count-down, before the
                // signal.
                guard point == .signallingReady, reached == key,
                      !added.exchange(true, ordering: .relaxed) else { return }
                box.value.addDependency(secondBox.value)
            }
            first.start()
            OperationSeams.remove()
            XCTAssertTrue(added.load(ordering: .relaxed), "width \(width): the finish did not signal the operation")
            // The signal, and the queue's take, came before `start()` returned.
            assertWaiting(op, "width \(width)", started: "started with a dependency unfinished",
                          signalled: "passed over, but left signalled: the next finish would not signal it")
            second.start()
            q.waitUntilAllOperationsAreFinished()
            XCTAssertEqual(ranAfterSecond.load(ordering: .relaxed), 1,
                           "width \(width): 0: never ran; 2: ran before its second dependency finished")
        }
    }

    /// The last dependency of a plain operation finishes while the operation is being
    /// added: after the add's claim, before the queue has linked it. The count-down's
    /// signal finds it not yet linked and is dropped; the add, which reads the count
    /// under the queue's lock (QueueMembership.swift, A2), finds it zero and starts it.
    /// Both ways a queue starts an operation found ready when it is added.
    func testALastDependencyFinishingWhileTheOperationIsAddedLosesNoReadiness() {
        for width in [OperationQueue.defaultMaxConcurrentOperationCount, 1] {
            let q = OperationQueue()
            q.maxConcurrentOperationCount = width
            let dependency = BlockOperation {}
            let ran = DispatchSemaphore(value: 0)
            let op = BlockOperation { ran.signal() }
            op.addDependency(dependency)
            let finished = add(op, to: q, finishing: dependency, at: .registering)
            XCTAssertTrue(finished && dependency.isFinished,
                          "width \(width): the dependency did not finish inside the add")
            if ran.wait(timeout: .now() + 60) != .success {
                XCTFail("width \(width): the operation never started: its readiness was lost")
                op.cancel() // ready whatever its count: the queue can drain
            }
            q.waitUntilAllOperationsAreFinished()
        }
    }

    /// `op`, in a queue, waits: not started, not signalled to its queue, not ready.
    private func assertWaiting(_ op: Operation, _ context: String, started: String, signalled: String,
                               line: UInt = #line) {
        XCTAssertFalse(op.queueRun.contains(.started), "\(context): \(started)", line: line)
        XCTAssertFalse(op.queueSync.readySignalled.load(ordering: .acquiring), "\(context): \(signalled)", line: line)
        XCTAssertFalse(op.isReady, context, line: line)
    }

    /// Adds `op` to `q`, and runs `dependency` by hand, on the adding thread, when the
    /// add reaches `point` for `op`. Whether it got there.
    private func add(_ op: Operation, to q: OperationQueue, finishing dependency: Operation,
                     at point: OperationSeams.Point) -> Bool {
        let key = Dependents.key(op)
        let finished = Atomic<Bool>(false)
        let box = UncheckedBox(dependency)
        OperationSeams.install { reachedPoint, reached in
            guard reachedPoint == point, reached == key, !finished.exchange(true, ordering: .relaxed) else { return }
            box.value.start()
        }
        q.addOperation(op)
        OperationSeams.remove()
        return finished.load(ordering: .relaxed)
    }

    /// An operation added behind a pending barrier whose last dependency finishes while
    /// it is added — after the add has linked it and released the queue's lock, before
    /// the edge to the barrier is registered — still waits for the barrier: that edge
    /// is counted under the lock (Readiness.swift, R9). For a plain operation, whose
    /// count-down signals it, and a subclass's, whose count-down asks its `isReady`.
    func testAnOperationAddedBehindABarrierWaitsForItWhenItsLastDependencyFinishesDuringTheAdd() {
        final class Subclassed: BlockOperation, @unchecked Sendable {}
        for subclassed in [false, true] {
            let q = OperationQueue()
            let log = Log()
            let hold = DispatchSemaphore(value: 0)
            q.addOperation { hold.wait(); log.add("held") }
            q.addBarrierBlock { log.add("barrier") }
            let dependency = BlockOperation {}
            let op = subclassed ? Subclassed { log.add("op") } : BlockOperation { log.add("op") }
            op.addDependency(dependency)
            let finished = add(op, to: q, finishing: dependency, at: .behindBarrier)
            let kind = subclassed ? "subclass" : "plain"
            XCTAssertTrue(finished && dependency.isFinished,
                          "\(kind): the dependency did not finish inside the add")
            // The count-down, and any start it caused, came before `start()` returned.
            assertWaiting(op, kind, started: "started ahead of the barrier", signalled: "signalled ahead of the barrier")
            hold.signal()
            q.waitUntilAllOperationsAreFinished()
            XCTAssertEqual(log.all, ["held", "barrier", "op"], kind)
        }
    }
}
