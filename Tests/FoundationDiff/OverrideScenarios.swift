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
        // A readiness condition opened without announcing it: the queue's next pass,
        // here the addition of another operation, asks it again.
        let q = OperationQueue()
        let op = QuietGate()
        q.addOperation(op)
        op.openSilently()
        usleep(20000)
        show("override.ready-opened-silently", [log.take(), "\(op.isFinished)"])
        q.addOperation(BlockOperation {})
        let returned = bounded("override.ready-opened-silently.wait", 1) { op.waitUntilFinished() }
        op.announce()
        returned.wait()
        show("override.ready-opened-silently.after", log.take())
    }
}
