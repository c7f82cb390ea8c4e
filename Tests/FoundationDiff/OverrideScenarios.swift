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
}
