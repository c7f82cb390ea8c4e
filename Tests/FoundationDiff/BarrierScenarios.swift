#if SPINDLE
import Spindle
#else
import Foundation
#endif
import Dispatch

/// Barriers among other work, cancelled with it, and what a cancel or a second start
/// does to an operation that has finished.
func barrierScenarios() {
    do {
        // On a serial queue, a barrier keeps its place between the operations around it.
        let q = OperationQueue()
        q.maxConcurrentOperationCount = 1
        q.isSuspended = true
        q.addOperation { log.add("a") }
        q.addBarrierBlock { log.add("barrier") }
        q.addOperation { log.add("b") }
        q.isSuspended = false
        q.waitUntilAllOperationsAreFinished()
        show("barrier.serial-order", log.take())
    }

    do {
        // cancelAllOperations while a barrier waits: what still runs, and whether work
        // added afterwards runs.
        let q = OperationQueue()
        q.isSuspended = true
        let a = BlockOperation { log.add("a") }, b = BlockOperation { log.add("b") }
        q.addOperation(a)
        q.addBarrierBlock { log.add("barrier") }
        q.addOperation(b)
        q.cancelAllOperations()
        q.isSuspended = false
        q.waitUntilAllOperationsAreFinished()
        show("barrier.cancelled-with-the-queue", [log.take(), "\(a.isFinished)", "\(b.isFinished)"])
        q.addOperations([BlockOperation { log.add("later") }], waitUntilFinished: true)
        show("barrier.cancelled-then-add", log.take())
    }

    do {
        // cancelAllOperations while the work ahead of a barrier runs: the barrier's block
        // does not run, and work added afterwards still waits for the work ahead.
        let q = OperationQueue()
        let started = DispatchSemaphore(value: 0), hold = DispatchSemaphore(value: 0)
        let a = BlockOperation { started.signal(); hold.wait(); log.add("a") }
        q.addOperation(a)
        started.wait()
        q.addBarrierBlock { log.add("barrier") }
        q.cancelAllOperations()
        q.addOperation { log.add("later, a finished: \(a.isFinished)") }
        hold.signal()
        q.waitUntilAllOperationsAreFinished()
        show("barrier.cancelled-while-work-ahead-runs", log.take())
    }

    do {
        // Operations added after a barrier wait for the ones before it, across priorities.
        let q = OperationQueue()
        q.isSuspended = true
        q.addOperation(named("before", .veryLow) { log.add("before") })
        q.addBarrierBlock { log.add("barrier") }
        q.addOperation(named("after", .veryHigh) { log.add("after") })
        q.isSuspended = false
        q.waitUntilAllOperationsAreFinished()
        show("barrier.priority-does-not-jump-it", log.take())
    }

    // An operation cancelled before it is added, added behind a barrier that waits: it
    // finishes without running. On a thread of its own: on Foundation on Linux the add
    // does not return.
    bounded("barrier.cancelled-added-behind", 2) {
        let q = OperationQueue()
        q.isSuspended = true
        q.addOperation { log.add("a") }
        q.addBarrierBlock { log.add("barrier") }
        let c = BlockOperation { log.add("c") }
        c.cancel()
        q.addOperation(c)
        q.isSuspended = false
        q.waitUntilAllOperationsAreFinished()
        show("barrier.cancelled-added-behind.after", [log.take(), "\(c.isCancelled)", "\(c.isFinished)"])
    }

    do {
        let op = BlockOperation { log.add("ran") }
        op.start()
        op.cancel()
        op.start()
        show("finished.cancel-and-restart", [log.take(), "\(op.isCancelled)", "\(op.isFinished)"])
        let a = named("a"), b = named("b")
        a.start()
        b.addDependency(a)
        b.removeDependency(a)
        show("finished.dependency-removed", [names(b.dependencies).joined(), "\(b.isReady)"])
    }
}

/// Cancelled operations where nothing else would start them: a queue of width zero,
/// and what the operations list shows of a cancelled operation before it finishes.
func cancelledHeldScenarios() {
    do {
        let q = OperationQueue()
        q.maxConcurrentOperationCount = 0
        let op = BlockOperation { log.add("ran") }
        q.addOperation(op)
        op.cancel()
        let returned = bounded("cancelled.width-zero.wait", 0.3) { op.waitUntilFinished() }
        show("cancelled.width-zero", [log.take(), "\(op.isFinished)", "\(q.operationCount)"])
        q.maxConcurrentOperationCount = 1
        returned.wait()
        q.waitUntilAllOperationsAreFinished()
        show("cancelled.width-zero.after-widening", [log.take(), "\(op.isFinished)"])
    }

    do {
        let q = OperationQueue()
        q.isSuspended = true
        let a = named("a"), b = named("b")
        q.addOperations([a, b], waitUntilFinished: false)
        a.cancel()
        show("cancelled.still-listed-while-suspended", [names(q.operations).joined(separator: ","), "\(q.operationCount)"])
        q.isSuspended = false
        q.waitUntilAllOperationsAreFinished()
    }
}
