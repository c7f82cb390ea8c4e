#if SPINDLE
import Spindle
#else
import Foundation
#endif
import Dispatch

/// Cancellation across dependencies and queues, and what running operations see.
func cancellationScenarios() {
    do {
        // A cancelled dependency in a suspended queue is not finished until that queue
        // retires it, so its dependent in another queue waits.
        let held = OperationQueue(), running = OperationQueue()
        held.isSuspended = true
        let dependency = BlockOperation { log.add("dependency") }
        let dependent = BlockOperation { log.add("dependent") }
        dependent.addDependency(dependency)
        held.addOperation(dependency)
        running.addOperation(dependent)
        dependency.cancel()
        show("cancelled-dependency.in-suspended-queue", [dependency.isFinished, dependent.isReady, dependent.isFinished])
        held.isSuspended = false
        dependent.waitUntilFinished()
        show("cancelled-dependency.after-resume", log.take())
    }

    do {
        // Cancelling a dependent finishes it without waiting for its dependency.
        let q = OperationQueue()
        let gate = DispatchSemaphore(value: 0), started = DispatchSemaphore(value: 0)
        let dependency = BlockOperation { started.signal(); gate.wait() }
        let dependent = BlockOperation { log.add("dependent ran") }
        dependent.addDependency(dependency)
        q.addOperations([dependency, dependent], waitUntilFinished: false)
        started.wait()
        dependent.cancel()
        bounded("cancelled-dependent.wait", 2) { dependent.waitUntilFinished() }
        show("cancelled-dependent", [dependent.isFinished, dependency.isFinished])
        gate.signal()
        q.waitUntilAllOperationsAreFinished()
        show("cancelled-dependent.log", log.take())
    }

    do {
        // Cancelled, never added, never started: not finished.
        let op = BlockOperation { log.add("ran") }
        op.cancel()
        show("cancelled-unqueued", [op.isReady, op.isFinished, op.isExecuting])
        bounded("cancelled-unqueued.wait", 0.2) { op.waitUntilFinished() }
        op.start()
        show("cancelled-unqueued.started", [log.take(), "\(op.isFinished)", "\(op.isExecuting)"])
    }

    do {
        // Added already cancelled.
        let q = OperationQueue()
        let op = BlockOperation { log.add("ran") }
        let done = DispatchSemaphore(value: 0)
        op.completionBlock = { done.signal() }
        op.cancel()
        q.addOperation(op)
        done.wait()
        q.waitUntilAllOperationsAreFinished()
        show("added-cancelled", [log.take(), "\(op.isFinished)", "\(q.operationCount)"])
    }

    do {
        // A main that checks isCancelled sees a cancel made while it runs.
        final class Polling: Operation, @unchecked Sendable {
            let started = DispatchSemaphore(value: 0)
            override func main() {
                started.signal()
                var rounds = 0
                while !isCancelled && rounds < 2000 { usleep(1000); rounds += 1 }
                log.add(isCancelled ? "saw cancel" : "never saw it")
            }
        }
        let q = OperationQueue()
        let op = Polling()
        q.addOperation(op)
        op.started.wait()
        op.cancel()
        q.waitUntilAllOperationsAreFinished()
        show("cancel.seen-by-main", [log.take(), "\(op.isFinished)", "\(op.isCancelled)"])
    }

    do {
        // Suspending stops new starts, not running operations.
        let q = OperationQueue()
        q.maxConcurrentOperationCount = 1
        let gate = DispatchSemaphore(value: 0), started = DispatchSemaphore(value: 0)
        q.addOperation { started.signal(); gate.wait(); log.add("first") }
        q.addOperation { log.add("second") }
        started.wait()
        q.isSuspended = true
        gate.signal()
        let returned = bounded("suspend.while-running.wait", 0.2) { q.waitUntilAllOperationsAreFinished() }
        show("suspend.while-running", [log.take(), "\(q.operationCount)"])
        q.isSuspended = false
        returned.wait()
        show("suspend.while-running.after-resume", [log.take(), "\(q.operationCount)"])
    }

    do {
        // Widening a queue starts what waits: three operations that each wait (up to ten
        // seconds, however busy the machine) for all three to be running find them
        // running together.
        final class Rendezvous: @unchecked Sendable {
            // @unchecked: `count` is only touched under `lock`.
            private let lock = NSLock()
            private var count = 0
            func arrive() { lock.lock(); count += 1; lock.unlock() }
            func all(_ n: Int) -> Bool { lock.lock(); defer { lock.unlock() }; return count >= n }
        }
        let q = OperationQueue()
        q.maxConcurrentOperationCount = 1
        q.isSuspended = true
        let rendezvous = Rendezvous()
        for _ in 0..<3 {
            q.addOperation {
                rendezvous.arrive()
                var waited = 0
                while !rendezvous.all(3) && waited < 10_000 { usleep(1000); waited += 1 }
                log.add("\(rendezvous.all(3))")
            }
        }
        q.maxConcurrentOperationCount = 3
        q.isSuspended = false
        q.waitUntilAllOperationsAreFinished()
        show("widen.runs-together", log.take())
    }

    do {
        let q = OperationQueue()
        let op = BlockOperation { log.add(Thread.current.name ?? "nil") }
        op.name = "named-operation"
        q.addOperations([op], waitUntilFinished: true)
        let threadName = log.take()
        show("thread-name.inside-named-operation", threadName == "named-operation" ? threadName : "not the operation's name")
    }
}
