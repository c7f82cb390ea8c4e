#if SPINDLE
import Spindle
#else
import Foundation
#endif
import Dispatch

/// Completion blocks, cancellation, suspension and width.
func completionScenarios() {
    do {
        let op = BlockOperation {}
        op.start()
        op.completionBlock = { log.add("late") }
        // Anything it would run, it would have run by the time this one has: the block is
        // queued where a completion block goes.
        let marker = BlockOperation {}
        let done = DispatchSemaphore(value: 0)
        marker.completionBlock = { done.signal() }
        marker.start()
        done.wait()
        show("completion.set-after-finish", log.take())
    }

    do {
        let op = BlockOperation {}
        let done = DispatchSemaphore(value: 0)
        op.completionBlock = { done.signal() }
        op.start()
        done.wait()
        usleep(10000)
        show("completion.property-after-run", op.completionBlock == nil ? "nil" : "kept")
    }

    do {
        let q = OperationQueue()
        q.isSuspended = true
        let op = BlockOperation { log.add("main") }
        let done = DispatchSemaphore(value: 0)
        op.completionBlock = { [unowned op] in
            log.add("finished=\(op.isFinished) cancelled=\(op.isCancelled) executing=\(op.isExecuting)")
            done.signal()
        }
        q.addOperation(op)
        op.cancel()
        q.isSuspended = false
        done.wait()
        show("completion.of-cancelled", log.take())
    }

    do {
        let q = OperationQueue()
        let started = DispatchSemaphore(value: 0), gate = DispatchSemaphore(value: 0), done = DispatchSemaphore(value: 0)
        let op = BlockOperation { started.signal(); gate.wait(); log.add("end") }
        op.completionBlock = { log.add("c"); done.signal() }
        q.addOperation(op)
        started.wait()
        op.cancel()
        show("cancel.executing", [op.isCancelled, op.isExecuting, op.isFinished])
        gate.signal()
        done.wait()
        show("cancel.executing.log", log.take())
    }

    // suspension, cancellation, width

    do {
        let q = OperationQueue()
        q.isSuspended = true
        let a = BlockOperation { log.add("a") }
        q.addOperation(a)
        a.cancel()
        show("suspended.cancel", [q.operationCount, a.isCancelled ? 1 : 0, a.isReady ? 1 : 0, a.isFinished ? 1 : 0])
        let returned = bounded("suspended.wait-for-cancelled", 0.3) { a.waitUntilFinished() }
        q.isSuspended = false
        returned.wait()
        q.waitUntilAllOperationsAreFinished()
        show("suspended.cancel.after-resume", [q.operationCount, a.isFinished ? 1 : 0])
        show("suspended.cancel.ran", log.take())
    }

    do {
        let q = OperationQueue()
        q.isSuspended = true
        for i in 0..<3 { q.addOperation { log.add("x\(i)") } }
        q.cancelAllOperations()
        show("suspended.cancel-all.count", q.operationCount)
        q.addOperation { log.add("new") }
        q.isSuspended = false
        q.waitUntilAllOperationsAreFinished()
        show("suspended.cancel-all.after-resume", [log.take(), "\(q.operationCount)"])
    }

    do {
        let q = OperationQueue()
        q.isSuspended = true
        let a = BlockOperation { log.add("a") }
        q.addOperation(a)
        let returned = bounded("suspended.wait", 0.2) { a.waitUntilFinished() }
        q.isSuspended = false
        returned.wait()
        show("suspended.wait.ran", log.take())
    }

    do {
        let q = OperationQueue()
        q.maxConcurrentOperationCount = 0
        q.addOperation { log.add("ran") }
        let returned = bounded("width-zero.wait", 0.2) { q.waitUntilAllOperationsAreFinished() }
        show("width-zero", [log.take(), "\(q.maxConcurrentOperationCount)", "\(q.operationCount)"])
        q.maxConcurrentOperationCount = 1
        returned.wait()
        show("width-zero.then-one", log.take())
    }

    do {
        // Priorities on a serial queue, resumed.
        let q = OperationQueue()
        q.maxConcurrentOperationCount = 1
        q.isSuspended = true
        q.addOperations(priorities.map { p in named(p.0, p.1) { log.add(p.0) } }, waitUntilFinished: false)
        q.isSuspended = false
        q.waitUntilAllOperationsAreFinished()
        show("priority.serial-resumed", log.take())
    }

    do {
        // Priorities on a width-limited queue whose slots are busy: one slot is freed, and
        // the waiting operations take turns in it while the other stays held.
        let q = OperationQueue()
        q.maxConcurrentOperationCount = 2
        let first = DispatchSemaphore(value: 0), second = DispatchSemaphore(value: 0)
        let started = DispatchSemaphore(value: 0), ranAll = DispatchSemaphore(value: 0)
        q.addOperation { started.signal(); first.wait() }
        q.addOperation { started.signal(); second.wait() }
        started.wait(); started.wait()
        for p in priorities { q.addOperation(named(p.0, p.1) { log.add(p.0); if p.0 == "lo" { ranAll.signal() } }) }
        first.signal()
        ranAll.wait()
        second.signal()
        q.waitUntilAllOperationsAreFinished()
        show("priority.width-two-busy", log.take())
    }

    do {
        let q = OperationQueue()
        let gate = DispatchSemaphore(value: 0)
        let a = BlockOperation { gate.wait() }
        q.addOperation(a)
        a.queuePriority = .veryHigh
        show("priority.of-executing", a.queuePriority.rawValue)
        gate.signal()
        q.waitUntilAllOperationsAreFinished()
    }
}
