import CSpindle
import Synchronization
import XCTest

@testable import Spindle

/// The queue's list of operations, step by step on its state: which finished
/// operations a prune, a drain and a quiet queue's release let go of, when, and in
/// what order (QueueRegistry.swift).
final class QueueListTests: XCTestCase {
    func testTheListReleasesAStartedOperationOnlyOnceItsRunnerIsDone() {
        // The protocol behind the test above, step by step and without the scheduler (a
        // debug build's extra retains around `start()` can hide an early release there).
        // The queue the runner reports to once it has released what a drain left it: the
        // drain counts the operation in `releasing` and gives the runner a reference.
        let queue = OperationQueue()
        let unmanagedQueue = Unmanaged.passUnretained(queue)
        for runnerFirst in [false, true] {
            let weak = Weak<Operation>()
            var state = OperationQueue.State(name: "drain-protocol")
            let u = Unmanaged<Operation>.passRetained(BlockOperation {}) // the list's reference
            u.withGuaranteedReference { op in
                weak.value = op
                state.link(u, op)
                op.setQueueRun(.started)
            }
            if runnerFirst { ChainRunner.runnerDone(u, queue: unmanagedQueue) }
            var released: Unmanaged<Operation>? = nil
            let leftToRunner = state.unlinkAll(onto: &released)
            XCTAssertEqual(leftToRunner, runnerFirst ? 0 : 1)
            XCTAssertEqual(state.linked, 0)
            XCTAssertNil(state.head)
            if runnerFirst {
                XCTAssertNotNil(released, "the runner was done: the drain releases the operation")
                OperationQueue.release(released)
                XCTAssertNil(weak.value)
            } else {
                XCTAssertNil(released, "the drain released an operation its runner still borrows")
                XCTAssertNotNil(weak.value)
                queue.state.locked { $0.releasing += 1 }
                _ = unmanagedQueue.retain()
                ChainRunner.runnerDone(u, queue: unmanagedQueue)
                XCTAssertNil(weak.value, "the runner did not release the reference the drain left it")
                XCTAssertEqual(queue.state.locked { $0.releasing }, 0, "the runner did not report its release")
            }
        }
        // Pruning takes only operations whose runner is done, however many have finished.
        var state = OperationQueue.State(name: "prune-protocol")
        var ops: [Unmanaged<Operation>] = []
        for _ in 0..<400 {
            let u = Unmanaged<Operation>.passRetained(BlockOperation {})
            u.withGuaranteedReference { op in
                state.link(u, op)
                op.setQueueRun(.started)
                op.queueSync.done.store(true, ordering: .releasing)
            }
            ops.append(u)
        }
        var released: Unmanaged<Operation>? = nil
        state.prune(unfinished: 0, onto: &released)
        XCTAssertNil(released, "pruned operations whose runners still borrow them")
        XCTAssertEqual(state.linked, 400)
        for u in ops { ChainRunner.runnerDone(u, queue: unmanagedQueue) }
        state.prune(unfinished: 0, onto: &released)
        XCTAssertEqual(state.linked, 0, "finished operations whose runners are done stay linked")
        OperationQueue.release(released)
    }

    func testPrunedAndDrainedOperationsAreReleasedOldestFirst() {
        // Finished operations are released in the order they were added, by prunes, by a
        // drain and by a quiet queue's release alike, as Foundation releases each as it
        // finishes: deinits that run the program's code see that order, and the allocator
        // merges the freed memory below the top of the adding thread's heap instead of
        // giving that top back to the kernel a page at a time (QueueRegistry.swift,
        // `ReleaseChain`). A prune releases what it unlinked one or two per add (`paced`).
        final class Tag: Sendable {
            let index: Int, log: Log
            init(_ index: Int, _ log: Log) { self.index = index; self.log = log }
            deinit { log.add("\(index)") }
        }
        enum Mode: String, CaseIterable { case drain, prunes, pruneThenDrain, pruneThenQuiet }
        for mode in Mode.allCases {
            let log = Log()
            var state = OperationQueue.State(name: mode.rawValue)
            for i in 0..<400 {
                let tag = Tag(i, log)
                let u = Unmanaged<Operation>.passRetained(BlockOperation { _ = tag })
                u.withGuaranteedReference { op in
                    state.link(u, op)
                    op.queueSync.done.store(true, ordering: .releasing)
                }
            }
            var released: Unmanaged<Operation>? = nil
            if mode == .drain {
                _ = state.unlinkAll(onto: &released)
                OperationQueue.release(released)
            } else {
                // 400 finished and none unfinished: the first prune sweeps them all off
                // the list and releases two of them.
                state.prune(unfinished: 0, onto: &released)
                OperationQueue.release(released)
                XCTAssertEqual(state.linked, 0, "\(mode): the sweep left operations on the list")
                XCTAssertEqual(log.all.count, 2, "\(mode): the first prune released \(log.all.count), not 2")
                XCTAssertEqual(state.pacedCount, 398)
                switch mode {
                case .prunes:
                    // Each later prune (an add's) releases two while more than 64 wait,
                    // then one.
                    while state.pacedCount > 0 {
                        let waiting = state.pacedCount, before = log.all.count
                        released = nil
                        state.prune(unfinished: 0, onto: &released)
                        OperationQueue.release(released)
                        XCTAssertEqual(log.all.count - before, waiting > 64 ? 2 : 1,
                                       "a prune with \(waiting) waiting released \(log.all.count - before)")
                        if log.all.count - before == 0 { break }
                    }
                case .pruneThenDrain:
                    released = nil
                    _ = state.unlinkAll(onto: &released)
                    OperationQueue.release(released)
                case .pruneThenQuiet:
                    released = state.releaseFinished()
                    XCTAssertEqual(state.releasing, 1, "a quiet queue's release is counted for the waits")
                    OperationQueue.release(released)
                case .drain: break
                }
                XCTAssertEqual(state.pacedCount, 0, "\(mode): operations left waiting to be released")
            }
            XCTAssertEqual(state.linked, 0)
            XCTAssertEqual(log.all, (0..<400).map { "\($0)" }, "\(mode): finished operations released out of order")
        }
    }

    func testTheListKeepsAnOperationWhileAReadyRingHoldsIt() {
        // The ready rings hold operations unretained; an operation that finishes
        // without starting while it waits there (one of a class that reports itself
        // finished: `retired`) stays in its ring until a scheduling pass skips it. Step
        // by step, without the scheduler: pruning must not release it meanwhile, and a
        // drain empties the rings before it releases.
        var state = OperationQueue.State(name: "ring-protocol")
        var weaks: [Weak<Operation>] = []
        for _ in 0..<400 {
            let u = Unmanaged<Operation>.passRetained(BlockOperation {}) // the list's reference
            u.withGuaranteedReference { op in
                weaks.append(Weak(op))
                state.link(u, op)
                state.push(op)
                op.queueFields.retired = true
                op.queueSync.done.store(true, ordering: .releasing)
            }
        }
        var released: Unmanaged<Operation>? = nil
        state.prune(unfinished: 0, onto: &released)
        XCTAssertNil(released, "pruned operations a ready ring still holds")
        XCTAssertEqual(state.linked, 400)
        XCTAssertFalse(state.readyIsEmpty)
        _ = state.unlinkAll(onto: &released)
        XCTAssertTrue(state.readyIsEmpty, "the drain left unretained operations in the rings")
        XCTAssertEqual(state.linked, 0)
        OperationQueue.release(released)
        released = nil
        XCTAssertTrue(weaks.allSatisfy { $0.value == nil }, "the drain kept operations alive")

        // Popped from its ring (skipped: it is retired), an operation may be pruned.
        let u = Unmanaged<Operation>.passRetained(BlockOperation {})
        let weak = Weak<Operation>()
        u.withGuaranteedReference { op in
            weak.value = op
            state.link(u, op)
            state.push(op)
            op.queueFields.retired = true
            op.queueSync.done.store(true, ordering: .releasing)
        }
        let counts = Atomic<UInt64>(0)
        XCTAssertTrue(state.takeStartable(counts).isEmpty, "a retired operation was started")
        XCTAssertTrue(state.readyIsEmpty)
        for _ in 0..<300 {
            let filler = Unmanaged<Operation>.passRetained(BlockOperation {})
            filler.withGuaranteedReference { state.link(filler, $0) }
        }
        state.prune(unfinished: 300, onto: &released)
        state.prune(unfinished: 0, onto: &released)
        OperationQueue.release(released)
        XCTAssertNil(weak.value, "a retired operation out of its ring was never pruned")
        XCTAssertEqual(state.linked, 300)
        released = nil
        _ = state.unlinkAll(onto: &released)
        OperationQueue.release(released)
    }

    func testOperationsFinishedInTheirReadyRingAreSkippedAfterThePruneThatFollows() {
        // The same, through the queue: on a serial queue, operations wait in their ring
        // behind a running one; operations of a class that reports itself finished
        // before it starts finish there without starting; the adds that follow prune
        // the list (it then holds far more finished operations than unfinished ones);
        // the next scheduling pass must still find the ring's entries alive, and skip
        // them. Under AddressSanitizer an early release is a use-after-free here.
        final class FinishesItself: FinishesOnItsOwn, @unchecked Sendable {
            let counter: ReleaseCounter
            init(_ counter: ReleaseCounter) { self.counter = counter }
            deinit { counter.released.add(1, ordering: .relaxed) }
            override func main() { XCTFail("an operation that had finished was started") }
        }
        let q = OperationQueue()
        q.maxConcurrentOperationCount = 1
        let counter = ReleaseCounter(), laterRan = ReleaseCounter()
        let gate = DispatchSemaphore(value: 0)
        let started = DispatchSemaphore(value: 0)
        q.addOperation { started.signal(); gate.wait() }
        started.wait()
        for _ in 0..<400 {
            // Only the queue holds it once this iteration ends.
            let op = FinishesItself(counter)
            q.addOperation(op)
            op.finishWithoutStarting()
        }
        // (A counter that is a class: an escaping closure cannot capture an Atomic.)
        for _ in 0..<20 { q.addOperation { _ = laterRan.released.add(1, ordering: .relaxed) } }
        gate.signal()
        q.waitUntilAllOperationsAreFinished()
        XCTAssertEqual(laterRan.released.load(ordering: .relaxed), 20)
        XCTAssertEqual(counter.released.load(ordering: .relaxed), 400, "the drained queue kept finished operations")
        XCTAssertEqual(q.operationCount, 0)
    }
}
