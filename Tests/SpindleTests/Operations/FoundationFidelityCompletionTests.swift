import Foundation
import Synchronization
import XCTest

@testable import Spindle

/// Foundation's behaviour for progress, completion blocks, block operations and custom
/// operations that change state without announcing it.
final class FoundationFidelityCompletionTests: XCTestCase {
    // MARK: progress

    /// An asynchronous operation that overrides `start()` without calling `super`.
    final class OwnStart: Operation, @unchecked Sendable {
        let done = Atomic<Bool>(false)
        override var isAsynchronous: Bool { true }
        override var isExecuting: Bool { false }
        override var isFinished: Bool { done.load(ordering: .acquiring) }
        override func start() {
            willChangeValue(forKey: "isFinished")
            done.store(true, ordering: .releasing)
            didChangeValue(forKey: "isFinished")
        }
    }

    func testProgressCountsOnlyOperationsWhoseMainRanToTheEnd() {
        let q = OperationQueue()
        q.progress.totalUnitCount = 3
        q.isSuspended = true
        let sawCurrent = Atomic<Bool>(false)
        q.addOperation(BlockOperation {
            sawCurrent.store(Progress.current() != nil, ordering: .relaxed)
        })
        // Implicit child progress: made while the operation's progress is current.
        q.addOperation(BlockOperation {
            let child = Progress(totalUnitCount: 10)
            child.completedUnitCount = 10
        })
        let cancelled = BlockOperation {}
        cancelled.cancel()
        q.addOperation(cancelled)
        q.addOperation(OwnStart())
        q.addBarrierBlock {}
        q.isSuspended = false
        XCTAssertTrue(drains(q))
        XCTAssertTrue(sawCurrent.load(ordering: .relaxed), "Progress.current() was nil inside main")
        XCTAssertEqual(q.progress.completedUnitCount, 2)
    }

    // MARK: completion blocks

    /// Whether the operation is still in `operations` inside its completion block is a
    /// race in Foundation (the block is queued before the queue drops the operation),
    /// so this asserts only what Foundation guarantees.
    func testACompletionBlockRunsOutsideAnyQueueAndMayWaitForTheQueue() {
        let q = OperationQueue()
        let op = BlockOperation {}
        let ref = UncheckedBox(op)
        let done = DispatchSemaphore(value: 0)
        let sawCurrent = Mutex<OperationQueue?>(nil)
        let finished = Atomic<Bool>(false)
        op.completionBlock = {
            sawCurrent.locked { $0 = OperationQueue.current }
            finished.store(ref.value.isFinished, ordering: .relaxed)
            q.waitUntilAllOperationsAreFinished()
            ref.value.waitUntilFinished()
            done.signal()
        }
        q.addOperation(op)
        XCTAssertEqual(done.wait(timeout: .now() + 60), .success, "the completion block deadlocked")
        XCTAssertNil(sawCurrent.locked { $0 })
        XCTAssertTrue(finished.load(ordering: .relaxed))
    }

    func testACompletionBlockMayWaitForADependentAndForWorkItAddsToItsSerialQueue() {
        let q = OperationQueue()
        q.maxConcurrentOperationCount = 1
        let op = BlockOperation {}
        let dependent = BlockOperation {}
        dependent.addDependency(op)
        let dep = UncheckedBox(dependent)
        let done = DispatchSemaphore(value: 0)
        op.completionBlock = {
            dep.value.waitUntilFinished()
            let more = BlockOperation {}
            q.addOperation(more)
            more.waitUntilFinished()
            done.signal()
        }
        q.addOperations([op, dependent], waitUntilFinished: false)
        XCTAssertEqual(done.wait(timeout: .now() + 60), .success, "the completion block deadlocked")
    }

    func testACompletionBlockFindsItsOperationAliveThroughAnUnownedCapture() {
        let done = DispatchSemaphore(value: 0)
        let cancelled = Atomic<Bool>(true)
        do {
            let op = BlockOperation {}
            op.completionBlock = { [unowned op] in
                cancelled.store(op.isCancelled, ordering: .relaxed)
                done.signal()
            }
            OperationQueue().addOperation(op)
        }
        XCTAssertEqual(done.wait(timeout: .now() + 60), .success)
        XCTAssertFalse(cancelled.load(ordering: .relaxed))
    }

    /// An asynchronous operation that finishes on a Dispatch thread of its own, as
    /// code wrapping a callback API does.
    final class FinishesElsewhere: Operation, @unchecked Sendable {
        let state = Mutex<(executing: Bool, finished: Bool)>((false, false))
        let body: @Sendable () -> Void
        init(_ body: @escaping @Sendable () -> Void) { self.body = body }
        override var isAsynchronous: Bool { true }
        override var isExecuting: Bool { state.locked { $0.executing } }
        override var isFinished: Bool { state.locked { $0.finished } }
        override func start() {
            willChangeValue(forKey: "isExecuting")
            state.locked { $0.executing = true }
            didChangeValue(forKey: "isExecuting")
            DispatchQueue.global().async { [self] in
                body()
                willChangeValue(forKey: "isFinished")
                willChangeValue(forKey: "isExecuting")
                state.locked { $0 = (false, true) }
                didChangeValue(forKey: "isExecuting")
                didChangeValue(forKey: "isFinished")
            }
        }
    }

    /// In how many of `rounds` rounds the event named `first` came before `second`:
    /// `round` adds operations that record events. Each round starts on an idle pool,
    /// its workers parked (they search for 50 µs before they park). The callers run it
    /// with one worker free (`withOneFreeWorker`), where the count is exact.
    private func ordering(_ first: String, before second: String, rounds: Int = 20,
                          _ round: (_ record: @escaping @Sendable (String) -> Void) -> Void) -> Int {
        var inOrder = 0
        for _ in 0..<rounds {
            usleep(2_000)
            let events = Mutex<[String]>([])
            let both = DispatchSemaphore(value: 0)
            round { name in
                events.locked { $0.append(name) }
                both.signal()
            }
            for _ in 0..<2 { XCTAssertEqual(both.wait(timeout: .now() + 60), .success) }
            let seen = events.locked { $0 }
            if let f = seen.firstIndex(of: first), let s = seen.firstIndex(of: second), f < s { inOrder += 1 }
        }
        return inOrder
    }

    final class SpinFlags: Sendable {
        let release = Atomic<Bool>(false)
        let started = Atomic<Int>(0)
    }

    /// Runs `body` with every worker of the default pool but one spinning on a task, so
    /// that work queued for the pool starts in the order Spindle queued it: no second
    /// worker can start the later task while the first is on its way. A spinning worker
    /// is on its CPU, so no spare worker stands in for it.
    private func withOneFreeWorker<T>(_ body: () -> T) -> T {
        let pool = ThreadPool.shared
        let flags = SpinFlags()
        let spinners = pool.activeWorkerCount - 1
        for _ in 0..<spinners {
            try? pool.submit {
                flags.started.add(1, ordering: .relaxed)
                while !flags.release.load(ordering: .acquiring) { sched_yield() }
            }
        }
        XCTAssertTrue(eventually(within: 60) { flags.started.load(ordering: .relaxed) == spinners })
        defer { flags.release.store(true, ordering: .releasing) }
        return body()
    }

    /// Foundation queues an operation's completion block before its queue starts the
    /// next operation, so on a serial queue the completion block starts first: code
    /// that hands a result on from a completion block to the next operation finds it
    /// there. Neither Foundation nor Spindle makes the next operation wait for the
    /// block, so this counts rounds: a worker that is searching for work just then may
    /// start the next operation beside the block.
    func testOnASerialQueueTheNextOperationStartsAfterTheCompletionBlock() {
        func serialRound(dependent: Bool, finishesElsewhere: Bool) -> (@escaping @Sendable (String) -> Void) -> Void {
            { record in
                let q = OperationQueue()
                q.maxConcurrentOperationCount = 1
                let first: Operation = finishesElsewhere ? FinishesElsewhere {} : BlockOperation {}
                first.completionBlock = { record("completion") }
                let next = BlockOperation { record("next") }
                if dependent { next.addDependency(first) }
                q.addOperations([first, next], waitUntilFinished: false)
            }
        }
        // With one worker free, the order Spindle queues them in is the order they start:
        // every round, whatever else the machine runs, ThreadSanitizer included.
        let rounds = 20
        withOneFreeWorker {
            XCTAssertEqual(ordering("completion", before: "next", rounds: rounds, serialRound(dependent: true, finishesElsewhere: false)),
                           rounds, "a dependent started before the completion block")
            XCTAssertEqual(ordering("completion", before: "next", rounds: rounds, serialRound(dependent: false, finishesElsewhere: false)),
                           rounds, "the next operation started before the completion block")
            XCTAssertEqual(ordering("completion", before: "next", rounds: rounds, serialRound(dependent: true, finishesElsewhere: true)),
                           rounds, "after an asynchronous operation, its dependent started before its completion block")
        }
    }

    /// On a queue with room, Foundation starts the dependents that an operation's
    /// finish makes ready before it queues the completion block, and so does Spindle
    /// (OperationLifecycle.swift, F7). With a second worker free, the kernel may still start
    /// the block first (it places the worker it wakes for the block where it likes), so
    /// the order is checked with one worker free, where the queueing order decides.
    func testADependentThatCanStartAtOnceStartsBeforeTheCompletionBlock() {
        let rounds = 20
        let alone = withOneFreeWorker {
            ordering("dependent", before: "completion", rounds: rounds) { record in
                let q = OperationQueue()
                let first = BlockOperation {}
                first.completionBlock = { record("completion") }
                let dependent = BlockOperation { record("dependent") }
                dependent.addDependency(first)
                q.addOperations([first, dependent], waitUntilFinished: false)
            }
        }
        XCTAssertEqual(alone, rounds, "with one worker free, the completion block started before a dependent that could start at once")
    }

    // MARK: block operations

    func testEveryBlockOfABlockOperationSeesItsQueueAsCurrent() {
        let q = OperationQueue()
        let op = BlockOperation {}
        let misses = Atomic<Int>(0)
        let ran = Counter()
        let check: @Sendable () -> Void = {
            if OperationQueue.current !== q { misses.add(1, ordering: .relaxed) }
            ran.increment()
            usleep(2_000) // long enough that the pool spreads them
        }
        op.addExecutionBlock(check)
        for _ in 0..<7 { op.addExecutionBlock(check) }
        q.addOperation(op)
        XCTAssertTrue(finishes(op))
        XCTAssertEqual(ran.value, 8)
        XCTAssertEqual(misses.load(ordering: .relaxed), 0)
    }

    // MARK: custom operations that do not announce a change

    /// Becomes finished inside `start()` without announcing it.
    final class SilentFinish: Operation, @unchecked Sendable {
        let done = Atomic<Bool>(false)
        override var isAsynchronous: Bool { true }
        override var isFinished: Bool { done.load(ordering: .acquiring) }
        override func start() { done.store(true, ordering: .releasing) }
    }

    func testAnUnannouncedReadinessChangeIsNoticedAtTheQueuesNextPass() {
        let q = OperationQueue()
        let op = FoundationFidelityTests.Gated(open: false)
        q.addOperation(op)
        XCTAssertTrue(settle())
        XCTAssertFalse(op.isFinished)
        op.open.store(true, ordering: .releasing) // no didChangeValue(forKey: "isReady")
        // The queue's next scheduling pass: another operation finishing.
        q.addOperation(BlockOperation {})
        XCTAssertTrue(finishes(op), "the queue never noticed the operation became ready")
        XCTAssertTrue(op.ran.load(ordering: .relaxed))
        // With nothing unannounced left, the queue is back in direct mode.
        XCTAssertEqual(q.counts.load(ordering: .acquiring) & OperationQueue.scheduledBit, 0)
    }

    func testAnUnannouncedFinishInsideStartIsNoticedWhenStartReturns() {
        let q = OperationQueue()
        let op = SilentFinish()
        q.addOperation(op)
        XCTAssertTrue(drains(q), "the queue never noticed the operation finished")
        XCTAssertTrue(finishes(op))
    }

    // MARK: custom operations that run `main` through `super.start()`

    /// Runs `main` through the inherited `start()` and finishes later, on another thread,
    /// once released: `isExecuting` and `isFinished` are its own, and it does not say it
    /// is asynchronous. Apple's "Advanced NSOperations" framework is built this way.
    final class FinishesAfterSuperStart: Operation, @unchecked Sendable {
        // @unchecked: `running` and `done` are only touched under `lock`.
        private let lock = NSLock()
        private var running = false, done = false
        let release = DispatchSemaphore(value: 0)
        let startReturned = DispatchSemaphore(value: 0)
        override var isExecuting: Bool { lock.withLock { running } }
        override var isFinished: Bool { lock.withLock { done } }
        override func start() {
            super.start()
            startReturned.signal()
        }
        override func main() {
            willChangeValue(forKey: "isExecuting")
            lock.withLock { running = true }
            didChangeValue(forKey: "isExecuting")
            Thread.detachNewThread { [self] in
                release.wait()
                willChangeValue(forKey: "isFinished")
                willChangeValue(forKey: "isExecuting")
                lock.withLock { running = false; done = true }
                didChangeValue(forKey: "isExecuting")
                didChangeValue(forKey: "isFinished")
            }
        }
    }

    /// Foundation's `start()` asks `isFinished` once `main()` returns, and finishes the
    /// operation only when it answers true: until the operation says so, its dependent
    /// waits, its queue counts it, and its completion block has not run.
    func testInAQueueItFinishesWhenItSaysSoNotWhenSuperStartReturns() {
        let q = OperationQueue()
        let op = FinishesAfterSuperStart()
        let completed = DispatchSemaphore(value: 0)
        op.completionBlock = { completed.signal() }
        let dependentRan = Atomic<Bool>(false)
        let dependent = BlockOperation { dependentRan.store(true, ordering: .releasing) }
        dependent.addDependency(op)
        q.addOperations([op, dependent], waitUntilFinished: false)
        op.startReturned.wait()
        XCTAssertTrue(op.isExecuting)
        XCTAssertFalse(op.isFinished)
        XCTAssertFalse(dependent.isReady, "the dependent was released when start() returned")
        XCTAssertEqual(q.operationCount, 2, "the queue counted the operation out when start() returned")
        XCTAssertEqual(completed.wait(timeout: .now()), .timedOut, "the completion block ran before the finish")
        op.release.signal()
        XCTAssertTrue(drains(q))
        XCTAssertTrue(op.isFinished && dependent.isFinished)
        XCTAssertTrue(dependentRan.load(ordering: .acquiring))
        XCTAssertEqual(completed.wait(timeout: .now() + 10), .success, "the completion block did not run once")
    }

    /// The same outside a queue: `start()` returns, and waiting for the operation waits
    /// for its own finish.
    func testStartedByHandItFinishesWhenItSaysSo() {
        let op = FinishesAfterSuperStart()
        let dependent = BlockOperation {}
        dependent.addDependency(op)
        op.start()
        XCTAssertFalse(op.isFinished)
        XCTAssertFalse(dependent.isReady, "the dependent was released when start() returned")
        op.release.signal()
        XCTAssertTrue(finishes(op))
        XCTAssertTrue(op.isFinished)
        XCTAssertTrue(dependent.isReady)
    }
}
