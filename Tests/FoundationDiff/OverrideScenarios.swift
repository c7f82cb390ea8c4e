#if SPINDLE
import Spindle
#else
import Foundation
#endif
import Dispatch

/// A queue subclass that says which of its entry points each way of adding work goes
/// through, as queues built on OperationQueue override them to track what they run.
final class RoutingQueue: OperationQueue, @unchecked Sendable {
    override func addOperation(_ op: Operation) {
        log.add("addOperation")
        super.addOperation(op)
    }
    override func addOperations(_ ops: [Operation], waitUntilFinished wait: Bool) {
        log.add("addOperations")
        super.addOperations(ops, waitUntilFinished: wait)
    }
    override func cancelAllOperations() {
        log.add("cancelAllOperations")
        super.cancelAllOperations()
    }
}

/// An operation that says when its overrides are called.
final class Announcing: Operation, @unchecked Sendable {
    override func start() {
        log.add("start")
        super.start()
    }
    override func main() { log.add("main executing=\(isExecuting)") }
    override func cancel() {
        log.add("cancel")
        super.cancel()
    }
}

/// An operation that says it is ready whatever its dependencies say.
final class AlwaysReady: Operation, @unchecked Sendable {
    override var isReady: Bool { true }
    override func main() { log.add("always-ready ran") }
}

/// A readiness condition that can be opened without announcing it.
final class QuietGate: Operation, @unchecked Sendable {
    // @unchecked: `open` is only touched under `lock`.
    private let lock = NSLock()
    private var open = false
    override var isReady: Bool { lock.lock(); defer { lock.unlock() }; return open && super.isReady }
    func openSilently() { lock.lock(); open = true; lock.unlock() }
    func announce() { willChangeValue(forKey: "isReady"); didChangeValue(forKey: "isReady") }
    override func main() { log.add("quiet-gate ran") }
}

/// A BlockOperation whose `main` is its own, calling the blocks' `main` or not.
final class OwnMain: BlockOperation, @unchecked Sendable {
    let callsSuper: Bool
    init(callsSuper: Bool) { self.callsSuper = callsSuper }
    override func main() {
        log.add("own-main")
        if callsSuper { super.main() }
    }
}

/// Subclasses' overrides: which of a queue's entry points each way of adding work goes
/// through, the overrides a queue calls on an operation, and a BlockOperation whose
/// `main` is replaced.
func overrideScenarios() {
    do {
        let q = RoutingQueue()
        q.isSuspended = true
        q.addOperation(BlockOperation {})
        show("override.queue.add-one", log.take())
        q.addOperation {}
        show("override.queue.add-block", log.take())
        q.addOperations([BlockOperation {}, BlockOperation {}], waitUntilFinished: false)
        show("override.queue.add-batch", log.take())
        q.addBarrierBlock {}
        show("override.queue.add-barrier", log.take())
        q.isSuspended = false
        q.waitUntilAllOperationsAreFinished()
        show("override.queue.wait", log.take())
    }

    do {
        let q = OperationQueue()
        let op = Announcing()
        q.addOperations([op], waitUntilFinished: true)
        show("override.operation.in-queue", log.take())
        let held = OperationQueue()
        held.isSuspended = true
        let waiting = Announcing()
        held.addOperation(waiting)
        held.cancelAllOperations()
        show("override.operation.cancel-all", log.take())
        held.isSuspended = false
        held.waitUntilAllOperationsAreFinished()
        show("override.operation.cancelled-then-run", [log.take(), "\(waiting.isFinished)"])
    }

    do {
        for callsSuper in [false, true] {
            let op = OwnMain(callsSuper: callsSuper)
            op.addExecutionBlock { log.add("block") }
            OperationQueue().addOperations([op], waitUntilFinished: true)
            show("override.block-main.super-\(callsSuper)", log.take())
        }
    }

    do {
        // An isReady override that ignores an unfinished dependency.
        let held = OperationQueue(), q = OperationQueue()
        held.isSuspended = true
        let dependency = BlockOperation { log.add("dependency ran") }
        let op = AlwaysReady()
        op.addDependency(dependency)
        held.addOperation(dependency)
        let returned = bounded("override.ready-ignores-dependencies.wait", 1) { q.addOperations([op], waitUntilFinished: true) }
        show("override.ready-ignores-dependencies", log.take())
        held.isSuspended = false
        returned.wait()
        held.waitUntilAllOperationsAreFinished()
        show("override.ready-ignores-dependencies.after", log.take())
    }

    do {
        // A readiness condition opened without announcing it does not start the
        // operation by itself; announcing it does.
        let q = OperationQueue()
        let op = QuietGate()
        q.addOperation(op)
        op.openSilently()
        usleep(20000)
        show("override.ready-opened-silently", [log.take(), "\(op.isFinished)"])
        op.announce()
        op.waitUntilFinished()
        show("override.ready-opened-silently.after", log.take())
    }
}

/// Property getters a subclass overrides instead of setting the property.
final class Urgent: Operation, @unchecked Sendable {
    let tag: String
    init(_ tag: String) { self.tag = tag }
    override var queuePriority: Operation.QueuePriority {
        get { .veryHigh }
        set { super.queuePriority = newValue }
    }
    override func main() { log.add(tag) }
}

final class Interactive: Operation, @unchecked Sendable {
    let tag: String
    init(_ tag: String) { self.tag = tag }
    override var qualityOfService: QualityOfService {
        get { .userInteractive }
        set { super.qualityOfService = newValue }
    }
    override func main() { log.add(tag) }
}

/// An operation that says it is asynchronous but keeps the inherited `start`.
final class SaysAsynchronous: Operation, @unchecked Sendable {
    override var isAsynchronous: Bool { true }
    override func main() { log.add("main") }
}

/// An operation that says which dependencies it is given.
final class ListsDependencies: Operation, @unchecked Sendable {
    override func addDependency(_ op: Operation) {
        log.add(type(of: op) == BlockOperation.self ? "addDependency(block)" : "addDependency(other)")
        super.addDependency(op)
    }
}

/// A queue whose width getter is its own.
final class OneAtATime: OperationQueue, @unchecked Sendable {
    override var maxConcurrentOperationCount: Int {
        get { 1 }
        set { super.maxConcurrentOperationCount = newValue }
    }
}

/// An operation that keeps a cancellation of its own and reports it through
/// `isCancelled`, without calling `cancel()`.
final class OwnCancellation: Operation, @unchecked Sendable {
    // @unchecked: `cancelledHere` is only touched under `lock`.
    private let lock = NSLock()
    private var cancelledHere = false
    override var isCancelled: Bool { lock.lock(); defer { lock.unlock() }; return cancelledHere || super.isCancelled }
    func cancelHere() { lock.lock(); cancelledHere = true; lock.unlock() }
    override func main() { log.add("main") }
}

/// Getters a subclass overrides: an operation's priority and quality of service, its
/// `isAsynchronous` with the inherited `start`, its `isCancelled`, `addDependency` as
/// the queue's barriers reach it, and a queue's width.
func getterOverrideScenarios() {
    do {
        let q = OperationQueue()
        q.maxConcurrentOperationCount = 1
        q.isSuspended = true
        q.addOperations([named("plain") { log.add("plain") }, Urgent("urgent")], waitUntilFinished: false)
        show("override.priority-getter", [String(describing: q.operations.map { $0.queuePriority.rawValue })])
        q.isSuspended = false
        q.waitUntilAllOperationsAreFinished()
        show("override.priority-getter.order", log.take())
    }

    do {
        let q = OperationQueue()
        q.maxConcurrentOperationCount = 2
        q.isSuspended = true
        let gate = DispatchSemaphore(value: 0)
        // One slot is held throughout; the other two take turns in the second.
        let blocker = BlockOperation { gate.wait() }
        let plain = named("plain") { log.add("plain") }, interactive = Interactive("interactive")
        q.addOperations([blocker, plain, interactive], waitUntilFinished: false)
        q.isSuspended = false
        plain.waitUntilFinished()
        interactive.waitUntilFinished()
        gate.signal()
        q.waitUntilAllOperationsAreFinished()
        show("override.qos-getter.order", log.take())
    }

    do {
        let op = SaysAsynchronous()
        let q = OperationQueue()
        let returned = bounded("override.asynchronous-inherited-start.wait", 1) { q.addOperations([op], waitUntilFinished: true) }
        show("override.asynchronous-inherited-start", [log.take(), "\(op.isFinished)"])
        returned.wait()
    }

    do {
        // What the inherited `start` and readiness make of it, in a queue and by hand.
        let q = OperationQueue()
        let op = OwnCancellation()
        op.cancelHere()
        q.addOperation(op)
        q.waitUntilAllOperationsAreFinished()
        show("override.cancelled-getter", [log.take(), "\(op.isFinished)"])
        let waiting = OwnCancellation(), dependency = named("dependency") { log.add("dependency") }
        waiting.addDependency(dependency)
        waiting.cancelHere()
        show("override.cancelled-getter.ready", waiting.isReady)
        q.addOperations([waiting, dependency], waitUntilFinished: true)
        show("override.cancelled-getter.dependency", [log.take(), "\(waiting.isFinished)"])
        let byHand = OwnCancellation()
        byHand.cancelHere()
        byHand.start()
        show("override.cancelled-getter.by-hand", [log.take(), "\(byHand.isFinished)"])
    }

    do {
        let q = OperationQueue()
        q.isSuspended = true
        q.addOperation(BlockOperation {})
        q.addBarrierBlock {}
        let op = ListsDependencies()
        q.addOperation(op)
        show("override.add-dependency-from-barrier", [log.take(), "\(op.dependencies.count)"])
        q.isSuspended = false
        q.waitUntilAllOperationsAreFinished()
    }

    do {
        let q = OneAtATime()
        let pair = MeetingPair(0.5)
        q.addOperations(pair.operations, waitUntilFinished: false)
        pair.bothReturned()
        show("override.width-getter", [log.take(), "\(q.maxConcurrentOperationCount)"])
    }
}
