#if SPINDLE
import Spindle
#else
import Foundation
#endif
import Dispatch

/// What code built on Operation reads back at the edges: a completion block's view of
/// its operation and queue, dependencies once they have finished, the width set back to
/// its default, a queue suspended or emptied from inside its own operation, and waits
/// on operations nothing will start.
func edgeScenarios() {
    do {
        // Inside its completion block, the operation is finished, and the block runs
        // outside any operation queue.
        let q = OperationQueue()
        let done = DispatchSemaphore(value: 0)
        let op = BlockOperation {}
        op.completionBlock = { [unowned op] in
            let current = OperationQueue.current
            log.add("finished=\(op.isFinished) executing=\(op.isExecuting)")
            log.add(current == nil ? "current=nil" : current === q ? "current=its-queue" : "current=other")
            done.signal()
        }
        q.addOperation(op)
        done.wait()
        show("completion.sees", log.take())
    }

    do {
        // A BlockOperation's completion block runs after every one of its blocks.
        let op = BlockOperation { log.add("b1") }
        op.addExecutionBlock { log.add("b2") }
        op.addExecutionBlock { log.add("b3") }
        show("block.count-before-start", op.executionBlocks.count)
        let done = DispatchSemaphore(value: 0)
        op.completionBlock = { log.add("c"); done.signal() }
        OperationQueue().addOperation(op)
        done.wait()
        let order = log.take().split(separator: " ").map(String.init)
        show("block.completion-after-blocks", [order.dropLast().sorted().joined(separator: ","), order.last ?? "none"])
    }

    do {
        let op = BlockOperation {}
        op.completionBlock = {}
        op.completionBlock = nil
        show("completion.set-nil", op.completionBlock == nil)
    }

    do {
        // Finished dependencies stay listed, and one added after it finished leaves the
        // operation ready.
        let q = OperationQueue()
        let a = named("a"), b = named("b"), late = named("late")
        b.addDependency(a)
        q.addOperations([a, b], waitUntilFinished: true)
        show("dependencies.after-finish", names(b.dependencies))
        let c = named("c")
        late.start()
        c.addDependency(late)
        show("dependencies.finished-then-added", [c.isReady, c.dependencies.count == 1])
    }

    do {
        // A finished operation given an unfinished dependency is not ready until that
        // dependency finishes.
        let done = named("done")
        done.start()
        let gate = DispatchSemaphore(value: 0), started = DispatchSemaphore(value: 0)
        let running = named("running") { started.signal(); gate.wait() }
        let q = OperationQueue()
        q.addOperation(running)
        started.wait()
        done.addDependency(running)
        let before = done.isReady
        gate.signal()
        running.waitUntilFinished()
        show("finished.dependency-added-then-finished", [before, done.isReady])
    }

    do {
        // The width set back to its default, and its default through the constant.
        let q = OperationQueue()
        q.maxConcurrentOperationCount = 1
        q.maxConcurrentOperationCount = -1
        let back = q.maxConcurrentOperationCount
        q.maxConcurrentOperationCount = 3
        q.maxConcurrentOperationCount = OperationQueue.defaultMaxConcurrentOperationCount
        show("width.back-to-default", [back, q.maxConcurrentOperationCount])
    }

    do {
        // The count seen from inside the first operation of a serial queue holds itself
        // and the two waiting behind it.
        let q = OperationQueue()
        q.maxConcurrentOperationCount = 1
        q.isSuspended = true
        let first = BlockOperation { log.add("count=\(q.operationCount)") }
        q.addOperations([first, BlockOperation {}, BlockOperation {}], waitUntilFinished: false)
        q.isSuspended = false
        q.waitUntilAllOperationsAreFinished()
        show("count.inside-first", log.take())
    }

    do {
        // An operation that suspends its own serial queue: the next one waits until the
        // queue is resumed from outside.
        let q = OperationQueue()
        q.maxConcurrentOperationCount = 1
        let first = BlockOperation { q.isSuspended = true }
        let second = BlockOperation { log.add("second") }
        q.addOperations([first, second], waitUntilFinished: false)
        first.waitUntilFinished()
        usleep(20000)
        show("suspend.from-inside", [log.take(), "\(q.isSuspended)", "\(second.isExecuting || second.isFinished)"])
        q.isSuspended = false
        q.waitUntilAllOperationsAreFinished()
        show("suspend.from-inside.after-resume", log.take())
    }

    do {
        // cancelAllOperations from inside an operation cancels that operation too, and
        // what is added afterwards runs.
        let q = OperationQueue()
        q.maxConcurrentOperationCount = 1
        q.isSuspended = true
        let first = BlockOperation()
        first.addExecutionBlock { [unowned first] in
            q.cancelAllOperations()
            log.add("self-cancelled=\(first.isCancelled)")
        }
        let second = BlockOperation { log.add("second") }
        q.addOperations([first, second], waitUntilFinished: false)
        q.isSuspended = false
        q.waitUntilAllOperationsAreFinished()
        show("cancel-all.from-inside", [log.take(), "\(second.isCancelled)", "\(second.isFinished)"])
        q.addOperations([BlockOperation { log.add("later") }], waitUntilFinished: true)
        show("cancel-all.then-add", log.take())
    }

    do {
        // An operation in a suspended queue is ready; one that depends on it, in a running
        // queue, waits until the first queue is resumed.
        let held = OperationQueue(), running = OperationQueue()
        held.isSuspended = true
        let a = named("a") { log.add("a") }, b = named("b") { log.add("b") }
        b.addDependency(a)
        held.addOperation(a)
        running.addOperation(b)
        usleep(20000)
        show("cross-queue.held", [a.isReady, b.isReady, b.isFinished])
        held.isSuspended = false
        b.waitUntilFinished()
        show("cross-queue.after-resume", log.take())
    }

    do {
        // Waiting for an operation that nothing starts waits until somebody does.
        let op = BlockOperation { log.add("ran") }
        let returned = bounded("wait.never-started", 0.3) { op.waitUntilFinished() }
        op.start()
        returned.wait()
        show("wait.never-started.after-start", [log.take(), "\(op.isFinished)"])
    }

    do {
        // addOperations with waitUntilFinished returns with every operation finished, the
        // cancelled ones too.
        let q = OperationQueue()
        let ops = (0..<4).map { i in named("\(i)") { log.add("\(i)") } }
        ops[2].cancel()
        q.addOperations(ops, waitUntilFinished: true)
        show("add-and-wait.finished", ops.map { $0.isFinished })
        show("add-and-wait.ran", log.take().split(separator: " ").sorted().joined(separator: ","))
    }

    do {
        let q = OperationQueue()
        q.name = ""
        let empty = q.name ?? "nil"
        q.qualityOfService = .utility
        show("queue.properties-read-back", [empty, "\(q.qualityOfService.rawValue)"])
    }

    do {
        // `current` where no queue launched the code: an operation started by hand, from
        // outside any queue and from inside another queue's operation, and a block an
        // operation hands to Dispatch.
        let manual = BlockOperation {
            log.add("manual:\(OperationQueue.current?.name ?? "nil") executing")
        }
        manual.start()
        let q = OperationQueue()
        q.name = "Q"
        let inner = BlockOperation { log.add("inner:\(OperationQueue.current?.name ?? "nil")") }
        let done = DispatchSemaphore(value: 0)
        q.addOperation {
            inner.start()
            DispatchQueue.global().async {
                log.add("dispatched:\(OperationQueue.current?.name ?? "nil")")
                done.signal()
            }
        }
        q.waitUntilAllOperationsAreFinished()
        done.wait()
        show("current.without-a-queue", log.take())
    }

    do {
        // A BlockOperation's blocks after it finished, and a block added while it waits
        // in a suspended queue.
        let q = OperationQueue()
        q.isSuspended = true
        let op = BlockOperation { log.add("first") }
        q.addOperation(op)
        op.addExecutionBlock { log.add("added-while-queued") }
        q.isSuspended = false
        op.waitUntilFinished()
        show("block.added-while-queued", log.take().split(separator: " ").sorted().joined(separator: ","))
        show("block.blocks-after-finish-count", op.executionBlocks.count)
    }

    do {
        // Waits that Foundation lets a program write: for an operation from inside its
        // own completion block, and, from inside a serial queue's operation, for a
        // batch added to that same queue (which can never start).
        let op = BlockOperation {}
        let done = DispatchSemaphore(value: 0)
        op.completionBlock = { [unowned op] in
            op.waitUntilFinished()
            log.add("returned")
            done.signal()
        }
        OperationQueue().addOperation(op)
        done.wait()
        show("wait.own-completion", log.take())

        let q = OperationQueue()
        q.maxConcurrentOperationCount = 1
        let started = DispatchSemaphore(value: 0)
        q.addOperation {
            started.signal()
            q.addOperations([BlockOperation { log.add("inner") }], waitUntilFinished: true)
            log.add("outer-returned")
        }
        started.wait()
        bounded("wait.batch-on-own-serial-queue", 0.3) { q.waitUntilAllOperationsAreFinished() }
        show("wait.batch-on-own-serial-queue.log", log.take())
    }
}
