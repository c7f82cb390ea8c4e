#if SPINDLE
import Spindle
#else
import Foundation
#endif
import Dispatch

/// The order a serial queue runs things in, where code built on Operation relies on it:
/// an operation held back by a dependency added later, a completion block against the
/// next operation, and asynchronous operations that finish on threads of their own.
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
        let a = named("a") { log.add("a") }, b = named("b") { log.add("b") }
        let done = DispatchSemaphore(value: 0)
        // The block takes long enough that `b`, which does not wait for it, starts first.
        a.completionBlock = { usleep(100_000); log.add("a-completion"); done.signal() }
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
}
