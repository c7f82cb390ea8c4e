import Synchronization
import XCTest

@testable import Spindle

// The examples of Apple's "Operation Queues" chapter (Concurrency Programming Guide), ported to Swift and
// run against Spindle's Operation / OperationQueue.

/// Listings 2-3 and 2-4: a non-concurrent operation that checks for cancellation on
/// every turn of its loop.
final class MyNonConcurrentOperation: Spindle.Operation, @unchecked Sendable {
    let iterations = Atomic<Int>(0)
    let limit: Int
    let stepDelay: useconds_t
    init(limit: Int, stepDelay: useconds_t = 0) {
        self.limit = limit
        self.stepDelay = stepDelay
    }
    override func main() {
        var isDone = false
        while !isCancelled && !isDone {
            if iterations.add(1, ordering: .relaxed).newValue >= limit { isDone = true }
            if stepDelay > 0 { usleep(stepDelay) }
        }
    }
}

/// Listings 2-5, 2-6 and 2-7: a concurrent operation that runs `main` on a thread of
/// its own and maintains `executing` / `finished` with the notifications.
final class MyOperation: Spindle.Operation, @unchecked Sendable {
    private let lock = NSLock()
    private var executing = false
    private var finished = false
    let ranMain = Atomic<Bool>(false)
    let work: @Sendable () -> Void

    init(work: @escaping @Sendable () -> Void = {}) { self.work = work }

    override var isConcurrent: Bool { true }
    override var isAsynchronous: Bool { true }
    override var isExecuting: Bool { lock.withLock { executing } }
    override var isFinished: Bool { lock.withLock { finished } }

    override func start() {
        // Always check for cancellation before launching the task.
        if isCancelled {
            // Must move the operation to the finished state if it is canceled.
            willChangeValue(forKey: "isFinished")
            lock.withLock { finished = true }
            didChangeValue(forKey: "isFinished")
            return
        }
        // If the operation is not canceled, begin executing the task.
        willChangeValue(forKey: "isExecuting")
        Thread.detachNewThread { self.main() }
        lock.withLock { executing = true }
        didChangeValue(forKey: "isExecuting")
    }

    override func main() {
        work()
        ranMain.store(true, ordering: .releasing)
        completeOperation()
    }

    func completeOperation() {
        willChangeValue(forKey: "isFinished")
        willChangeValue(forKey: "isExecuting")
        lock.withLock {
            executing = false
            finished = true
        }
        didChangeValue(forKey: "isExecuting")
        didChangeValue(forKey: "isFinished")
    }
}

/// Listing 2-8: the manual-execution helper.
@discardableResult
func performOperation(_ anOp: Spindle.Operation) -> Bool {
    var ranIt = false
    if anOp.isReady && !anOp.isCancelled {
        if !anOp.isConcurrent {
            anOp.start()
        } else {
            Thread.detachNewThread { anOp.start() }
        }
        ranIt = true
    } else if anOp.isCancelled {
        // If it was canceled before it was started, it is finished: starting it moves
        // it to the finished state without running main.
        anOp.start()
        ranIt = true
    }
    return ranIt
}

final class GuideExampleTests: XCTestCase {
    func testNonConcurrentOperationRunsToCompletionInAQueue() {
        let q = OperationQueue()
        let op = MyNonConcurrentOperation(limit: 1000)
        q.addOperation(op)
        op.waitUntilFinished()
        XCTAssertEqual(op.iterations.load(ordering: .relaxed), 1000)
        XCTAssertTrue(op.isFinished)
    }

    func testNonConcurrentOperationStopsWhenCancelled() {
        let q = OperationQueue()
        let op = MyNonConcurrentOperation(limit: Int.max, stepDelay: 100)
        q.addOperation(op)
        while op.iterations.load(ordering: .relaxed) < 5 { usleep(100) }
        op.cancel()
        op.waitUntilFinished()
        XCTAssertLessThan(op.iterations.load(ordering: .relaxed), Int.max)
        XCTAssertTrue(op.isCancelled)
        XCTAssertTrue(op.isFinished)
    }

    func testConcurrentOperationTemplateInAQueueReleasesItsDependents() {
        let q = OperationQueue()
        let first = MyOperation { usleep(20_000) }
        let sawFirstDone = Atomic<Bool>(false)
        let firstRef = UncheckedBox(first)
        let second = BlockOperation { sawFirstDone.store(firstRef.value.isFinished, ordering: .relaxed) }
        second.addDependency(first)
        q.addOperations([second, first], waitUntilFinished: true)
        XCTAssertTrue(first.ranMain.load(ordering: .acquiring))
        XCTAssertTrue(first.isFinished)
        XCTAssertTrue(second.isFinished)
        XCTAssertTrue(sawFirstDone.load(ordering: .relaxed), "the dependent started before the async operation reported finished")
        XCTAssertEqual(q.operationCount, 0)
    }

    func testConcurrentOperationTemplateCancelledBeforeStart() {
        let q = OperationQueue()
        q.isSuspended = true
        let op = MyOperation()
        q.addOperation(op)
        op.cancel()
        q.isSuspended = false
        op.waitUntilFinished()
        XCTAssertFalse(op.ranMain.load(ordering: .acquiring))
        XCTAssertTrue(op.isFinished)
    }

    func testManualExecutionHelper() {
        // Non-concurrent: runs on this thread.
        let thread = UncheckedBox(Thread.current)
        let sameThread = Atomic<Bool>(false)
        let a = BlockOperation { sameThread.store(Thread.current == thread.value, ordering: .relaxed) }
        XCTAssertTrue(performOperation(a))
        XCTAssertTrue(a.isFinished)
        XCTAssertTrue(sameThread.load(ordering: .relaxed))
        // Concurrent: runs on a thread of its own; waitUntilFinished sees it finish.
        let b = MyOperation()
        XCTAssertTrue(performOperation(b))
        b.waitUntilFinished()
        XCTAssertTrue(b.ranMain.load(ordering: .acquiring))
        // Not ready: not run.
        let c = BlockOperation {}
        let dep = BlockOperation {}
        c.addDependency(dep)
        XCTAssertFalse(performOperation(c))
        XCTAssertFalse(c.isFinished)
        // Cancelled: moved to finished without running.
        let ran = Atomic<Bool>(false)
        let d = BlockOperation { ran.store(true, ordering: .relaxed) }
        d.cancel()
        XCTAssertTrue(performOperation(d))
        XCTAssertTrue(d.isFinished)
        XCTAssertFalse(ran.load(ordering: .relaxed))
    }
}
