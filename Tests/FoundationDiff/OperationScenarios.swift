#if SPINDLE
import Spindle
#else
import Foundation
#endif
import Dispatch

/// Defaults, the operations list, dependencies and readiness, BlockOperation.
func operationScenarios() {
    do {
        let op = Operation(), block = BlockOperation {}, queue = OperationQueue()
        show("defaults.operation", [op.name ?? "nil", "\(op.queuePriority.rawValue)", "\(op.qualityOfService.rawValue)",
                                    "\(op.isReady)", "\(op.isExecuting)", "\(op.isFinished)", "\(op.isCancelled)", "\(op.isAsynchronous)"])
        show("defaults.block", [block.name ?? "nil", "\(block.qualityOfService.rawValue)", "\(block.executionBlocks.count)"])
        show("defaults.queue", ["\(queue.maxConcurrentOperationCount)", "\(queue.qualityOfService.rawValue)",
                                "\(queue.isSuspended)", "\(queue.operationCount)", "\(queue.underlyingQueue == nil)"])
        show("defaults.max-constant", OperationQueue.defaultMaxConcurrentOperationCount)
    }

    // the operations list and dependencies

    do {
        let q = OperationQueue()
        q.isSuspended = true
        q.addOperations(priorities.map { named($0.0, $0.1) }, waitUntilFinished: false)
        show("list.order-with-priorities", names(q.operations))
        show("list.count", q.operationCount)
        q.addOperation {}
        show("list.block-form-type", q.operations.map { "\(type(of: $0))" }.last ?? "none")
        q.isSuspended = false
        q.waitUntilAllOperationsAreFinished()
        show("list.after-drain", q.operationCount)
    }

    do {
        let a = named("a"), b = named("b"), c = named("c")
        c.addDependency(b); c.addDependency(a); c.addDependency(b)
        show("dependencies.order-and-duplicates", names(c.dependencies))
        c.removeDependency(b)
        show("dependencies.after-remove", names(c.dependencies))
        c.removeDependency(named("stranger"))
        show("dependencies.remove-unknown", names(c.dependencies))
    }

    do {
        let a = named("a"), b = named("b")
        b.addDependency(a)
        show("ready.unstarted-dependency", [a.isReady, b.isReady])
        a.start()
        show("ready.after-dependency-start", b.isReady)
    }

    do {
        // A cancelled dependency that is still executing does not make its dependent ready.
        let q = OperationQueue()
        let gate = DispatchSemaphore(value: 0), started = DispatchSemaphore(value: 0)
        let a = BlockOperation { started.signal(); gate.wait() }
        let b = BlockOperation { log.add("b") }
        b.addDependency(a)
        q.addOperations([a, b], waitUntilFinished: false)
        started.wait()
        a.cancel()
        show("ready.cancelled-executing-dependency", [b.isReady, a.isCancelled, a.isExecuting, a.isFinished])
        gate.signal()
        q.waitUntilAllOperationsAreFinished()
        show("ready.cancelled-executing-dependency.ran", log.take())
    }

    do {
        // A dependency never added anywhere holds its dependent, cancelled or not, until it
        // finishes.
        let q = OperationQueue()
        let never = BlockOperation {}
        let b = BlockOperation { log.add("b") }
        b.addDependency(never)
        q.addOperation(b)
        never.cancel()
        show("dependency.cancelled-unstarted", [b.isReady, b.isFinished, never.isFinished])
        never.start()
        b.waitUntilFinished()
        show("dependency.cancelled-then-started", [log.take(), "\(b.isFinished)"])
    }

    // BlockOperation

    do {
        let op = BlockOperation()
        op.start()
        show("block.empty-start", [op.isFinished, op.isExecuting])
        let q = OperationQueue()
        let queued = BlockOperation()
        q.addOperations([queued], waitUntilFinished: true)
        show("block.empty-queued", queued.isFinished)
    }

    do {
        let op = BlockOperation {}
        op.addExecutionBlock {}
        op.start()
        show("block.blocks-after-finish", op.executionBlocks.count)
    }

    do {
        // Two blocks of one operation that each wait for the other: they can only both
        // finish if they run at the same time.
        let first = DispatchSemaphore(value: 0), second = DispatchSemaphore(value: 0)
        let op = BlockOperation { first.signal(); second.wait() }
        op.addExecutionBlock { second.signal(); first.wait() }
        let q = OperationQueue()
        q.addOperation(op)
        bounded("block.blocks-run-concurrently", 2) { op.waitUntilFinished() }
    }

    // An operation that depends on itself waits for ever, until it is cancelled. On a
    // thread of its own: on Foundation on Linux, addDependency(self) does not return.
    bounded("self-dependency", 2) {
        let q = OperationQueue()
        let op = BlockOperation { log.add("ran") }
        op.addDependency(op)
        q.addOperation(op)
        show("self-dependency.ready", op.isReady)
        op.cancel()
        op.waitUntilFinished()
        show("self-dependency.cancelled", [log.take(), "\(op.isFinished)"])
    }

    do {
        let op = BlockOperation()
        for i in 0..<3 { op.addExecutionBlock { [unowned op] in log.add("b\(i):\(op.isExecuting)") } }
        let done = DispatchSemaphore(value: 0)
        op.completionBlock = { log.add("c"); done.signal() }
        OperationQueue().addOperations([op], waitUntilFinished: true)
        done.wait()
        show("block.blocks-see-executing", log.take().split(separator: " ").sorted())
    }

    do {
        let q = OperationQueue()
        let op = BlockOperation {}
        op.addExecutionBlock { [unowned op] in log.add("executing=\(op.isExecuting) finished=\(op.isFinished) ready=\(op.isReady)") }
        q.addOperations([op], waitUntilFinished: true)
        show("block.state-inside", log.take())
    }
}
