#if SPINDLE
import Spindle
#else
import Foundation
#endif
import Dispatch

// The asynchronous base class that many code bases define for themselves: a state enum
// whose raw values name the keys (`"is" + "Executing"`), announced around each change
// with `willChangeValue(forKey:)` and `didChangeValue(forKey:)` for both the old state's
// key and the new one's, an `isReady` that also asks the state (so `isReady` is announced
// when the operation leaves `.ready`, while it starts), and a `start()` that does not call
// `super`. Subclasses put their work in `main()` and call `finish()`, at once or later:
// from a thread of their own or from a Swift task.

class AsynchronousBase: Operation, @unchecked Sendable {
    enum State: String {
        case ready, executing, finished
        var key: String { "is" + rawValue.prefix(1).uppercased() + rawValue.dropFirst() }
    }

    // @unchecked: `current` is only touched under `lock`.
    private let lock = NSLock()
    private var current = State.ready

    var state: State {
        get { lock.lock(); defer { lock.unlock() }; return current }
        set {
            let old = state
            willChangeValue(forKey: newValue.key)
            willChangeValue(forKey: old.key)
            lock.lock(); current = newValue; lock.unlock()
            didChangeValue(forKey: old.key)
            didChangeValue(forKey: newValue.key)
        }
    }

    override var isAsynchronous: Bool { true }
    override var isReady: Bool { super.isReady && state == .ready }
    override var isExecuting: Bool { state == .executing }
    override var isFinished: Bool { state == .finished }

    override func start() {
        if isCancelled {
            finish()
            return
        }
        state = .executing
        main()
    }

    func finish() {
        if state != .finished { state = .finished }
    }
}

/// Logs its work on a thread of its own, once released, then finishes; a cancelled one
/// finishes without working.
final class ThreadWork: AsynchronousBase, @unchecked Sendable {
    let label: String
    let release = DispatchSemaphore(value: 0)
    let began = DispatchSemaphore(value: 0)
    init(_ label: String) {
        self.label = label
        super.init()
    }
    override func main() {
        began.signal()
        Thread.detachNewThread { [self] in
            release.wait()
            log.add(isCancelled ? "\(label)-cancelled" : label)
            finish()
        }
    }
}

/// Its work in a Swift task, as code written for Swift concurrency bridges to a queue.
final class TaskWork: AsynchronousBase, @unchecked Sendable {
    let label: String
    init(_ label: String) {
        self.label = label
        super.init()
    }
    override func main() {
        Task { [self] in
            await Task.yield()
            log.add(label)
            finish()
        }
    }
}

/// Finishes inside `start()`, before returning.
final class AtOnce: AsynchronousBase, @unchecked Sendable {
    override func main() {
        log.add("at-once")
        finish()
    }
}

/// Counts how many of its kind run at once, the most ever, and finishes from a thread
/// of its own.
final class Overlapping: AsynchronousBase, @unchecked Sendable {
    // @unchecked: the counts are only touched under `countLock`.
    nonisolated(unsafe) static var running = 0, most = 0
    static let countLock = NSLock()
    override func main() {
        Self.countLock.lock()
        Self.running += 1
        Self.most = max(Self.most, Self.running)
        Self.countLock.unlock()
        Thread.detachNewThread { [self] in
            usleep(2000)
            Self.countLock.lock(); Self.running -= 1; Self.countLock.unlock()
            finish()
        }
    }
}

func baseClassScenarios() {
    do {
        let q = OperationQueue()
        let op = ThreadWork("work")
        let after = named("after") { log.add("after") }
        after.addDependency(op)
        q.addOperations([op, after], waitUntilFinished: false)
        op.began.wait()
        show("base.while-working", [op.isExecuting, op.isFinished, op.isReady, after.isReady, after.isFinished])
        show("base.count-while-working", q.operationCount)
        op.release.signal()
        q.waitUntilAllOperationsAreFinished()
        show("base.after", [log.take(), "\(op.state)", "\(op.isReady)", "\(after.isFinished)"])
    }
    do {
        // Cancelled in the queue before it starts: its `start` finishes it, and what
        // waits for it runs.
        let op = ThreadWork("never")
        let after = named("after") { log.add("after") }
        after.addDependency(op)
        addCancelledWhileSuspended([op, after], cancelling: op)
        show("base.cancelled-before-start", [log.take(), "\(op.state)", "\(op.isCancelled)"])
    }
    do {
        // Cancelled while it works: the work sees it, and finishes early.
        let q = OperationQueue()
        let op = ThreadWork("work")
        q.addOperation(op)
        op.began.wait()
        op.cancel()
        show("base.cancelled-while-working", [op.isExecuting, op.isFinished, op.isCancelled])
        op.release.signal()
        q.waitUntilAllOperationsAreFinished()
        show("base.cancelled-while-working.after", [log.take(), "\(op.state)"])
    }
    do {
        let q = OperationQueue()
        let op = AtOnce()
        let after = named("after") { log.add("after") }
        after.addDependency(op)
        q.addOperations([op, after], waitUntilFinished: true)
        // Foundation's wait above returns once each says it has finished, which can be
        // before the queue has let go of it; this one returns once the queue is empty.
        q.waitUntilAllOperationsAreFinished()
        show("base.finish-inside-start", [log.take(), "\(op.state)", "\(q.operationCount)"])
    }
    do {
        // On a serial queue: each starts once the one before it has said it finished.
        let q = OperationQueue()
        q.maxConcurrentOperationCount = 1
        q.isSuspended = true
        let ops: [Operation] = (1...5).map { i in i % 2 == 0 ? TaskWork("task\(i)") : AtOnce() }
        q.addOperations(ops, waitUntilFinished: false)
        q.isSuspended = false
        q.waitUntilAllOperationsAreFinished()
        show("base.serial", log.take())
    }
    do {
        // Its work in a Swift task; a dependency chain of them.
        let q = OperationQueue()
        let ops = (1...4).map { TaskWork("t\($0)") }
        for (a, b) in zip(ops, ops.dropFirst()) { b.addDependency(a) }
        q.addOperations(ops.reversed(), waitUntilFinished: true)
        show("base.task-chain", [log.take(), "\(ops.map(\.isFinished))"])
    }
    do {
        // A width of two is kept while each runs on after `start()` returns.
        let q = OperationQueue()
        q.maxConcurrentOperationCount = 2
        let ops = (0..<6).map { _ in Overlapping() }
        q.addOperations(ops, waitUntilFinished: true)
        Overlapping.countLock.lock()
        let most = Overlapping.most
        Overlapping.countLock.unlock()
        show("base.width", [most <= 2, ops.allSatisfy(\.isFinished)])
    }
    do {
        // Waited for from outside the queue, while its work goes on after `start()`.
        let q = OperationQueue()
        let op = ThreadWork("waited")
        q.addOperation(op)
        op.began.wait()
        let waiter = DispatchSemaphore(value: 0)
        Thread.detachNewThread { op.waitUntilFinished(); log.add("wait-returned"); waiter.signal() }
        op.release.signal()
        waiter.wait()
        show("base.wait", [log.take(), "\(op.isFinished)"])
    }
}
