#if SPINDLE
import Spindle
#else
import Foundation
#endif
import Dispatch

/// The order a serial queue runs things in, where code built on Operation relies on it:
/// an operation held back by a dependency added later, a completion block against the
/// next operation, asynchronous operations that finish on threads of their own, a
/// priority raised while waiting, a width raised from inside, and a queue the program
/// drops while operations wait in it.
func sequenceScenarios() {
    do {
        let q = OperationQueue()
        q.maxConcurrentOperationCount = 1
        q.isSuspended = true
        let a = named("a") { log.add("a") }, b = named("b") { log.add("b") }, c = named("c") { log.add("c") }
        a.addDependency(c)
        q.addOperations([a, b, c], waitUntilFinished: false)
        q.isSuspended = false
        q.waitUntilAllOperationsAreFinished()
        show("serial.dependency-reorders", log.take())
    }

    do {
        let q = OperationQueue()
        q.maxConcurrentOperationCount = 1
        q.isSuspended = true
        let bRan = DispatchSemaphore(value: 0)
        let a = named("a") { log.add("a") }, b = named("b") { log.add("b"); bRan.signal() }
        let done = DispatchSemaphore(value: 0)
        // The block waits for `b`, however busy the machine: a queue whose next operation
        // does not wait for the completion block logs `b` first; one whose next operation
        // waited would leave the block to give up after ten seconds and log it first.
        a.completionBlock = { _ = bRan.wait(timeout: .now() + 10); log.add("a-completion"); done.signal() }
        q.addOperations([a, b], waitUntilFinished: false)
        q.isSuspended = false
        q.waitUntilAllOperationsAreFinished()
        done.wait()
        show("serial.completion-and-next", log.take())
    }

    do {
        let q = OperationQueue()
        q.maxConcurrentOperationCount = 1
        let ops = (0..<3).map { _ in AsyncTemplate() }
        q.addOperations(ops, waitUntilFinished: false)
        for (i, op) in ops.enumerated() {
            // Once this one runs, give a second one time to start beside it (it must not).
            for _ in 0..<5000 where !op.isExecuting { usleep(1000) }
            usleep(20000)
            log.add("running=\(ops.map { $0.isExecuting ? "1" : "0" }.joined())")
            op.release.signal()
            op.waitUntilFinished()
            log.add("done\(i)")
        }
        q.waitUntilAllOperationsAreFinished()
        show("serial.asynchronous-operations", log.take())
    }

    do {
        // A waiting operation's priority raised after it was added.
        let q = OperationQueue()
        q.maxConcurrentOperationCount = 1
        q.isSuspended = true
        let a = named("a") { log.add("a") }, b = named("b") { log.add("b") }, c = named("c") { log.add("c") }
        q.addOperations([a, b, c], waitUntilFinished: false)
        c.queuePriority = .high
        q.isSuspended = false
        q.waitUntilAllOperationsAreFinished()
        show("serial.priority-raised-while-waiting", log.take())
    }

    do {
        // The running operation of a serial queue widens it: the two behind it start
        // together.
        let q = OperationQueue()
        q.maxConcurrentOperationCount = 1
        q.isSuspended = true
        let widen = BlockOperation { q.maxConcurrentOperationCount = 2 }
        let pair = MeetingPair(2)
        q.addOperations([widen] + pair.operations, waitUntilFinished: false)
        q.isSuspended = false
        pair.bothReturned()
        q.waitUntilAllOperationsAreFinished()
        show("serial.widened-from-inside", log.take())
    }

    do {
        // A queue the program drops while operations wait in it still runs them, in order.
        var ops: [Operation] = []
        do {
            let q = OperationQueue()
            q.maxConcurrentOperationCount = 1
            q.isSuspended = true
            ops = (0..<3).map { i in named("\(i)") { log.add("\(i)") } }
            q.addOperations(ops, waitUntilFinished: false)
            q.isSuspended = false
        }
        for op in ops { op.waitUntilFinished() }
        show("queue.dropped-with-waiting-operations", log.take())
    }
}
