#if SPINDLE
import Spindle
#else
import Foundation
#endif
import Dispatch

/// The queue: waits, `current`, names, `underlyingQueue`, quality of service, progress,
/// barriers.
func queueScenarios() {
    do {
        let q = OperationQueue()
        q.addOperation { usleep(10000); q.addOperation { usleep(10000); log.add("late") } }
        q.waitUntilAllOperationsAreFinished()
        show("wait-all.covers-operations-added-meanwhile", log.take())
    }

    do {
        // Waiting for the whole queue from inside one of its operations waits for that
        // operation too: it never returns.
        let q = OperationQueue()
        let inside = DispatchSemaphore(value: 0)
        q.addOperation {
            bounded("wait-all.from-inside.wait", 0.2) { q.waitUntilAllOperationsAreFinished() }
            inside.signal()
        }
        inside.wait()
        q.waitUntilAllOperationsAreFinished()
    }

    do {
        // The operations list holds what runs and what waits, in the order added.
        let q = OperationQueue()
        q.maxConcurrentOperationCount = 1
        let gate = DispatchSemaphore(value: 0), started = DispatchSemaphore(value: 0)
        let running = named("running") { started.signal(); gate.wait() }
        q.addOperations([running, named("waiting")], waitUntilFinished: false)
        started.wait()
        show("list.running-and-waiting", [names(q.operations), ["\(q.operationCount)"]])
        gate.signal()
        q.waitUntilAllOperationsAreFinished()
        show("list.drained", names(q.operations))
    }

    do {
        // A completion block adds to its operation's serial queue and waits for it.
        let q = OperationQueue()
        q.maxConcurrentOperationCount = 1
        let done = DispatchSemaphore(value: 0)
        let op = BlockOperation { log.add("op") }
        op.completionBlock = {
            q.addOperation { log.add("added by completion") }
            q.waitUntilAllOperationsAreFinished()
            log.add("waited")
            done.signal()
        }
        q.addOperation(op)
        done.wait()
        show("completion.adds-and-waits", log.take())
    }

    do {
        let qa = OperationQueue(), qb = OperationQueue()
        qa.name = "A"; qb.name = "B"
        qa.addOperation {
            log.add("A:\(OperationQueue.current?.name ?? "nil")")
            qb.addOperations([BlockOperation { log.add("B:\(OperationQueue.current?.name ?? "nil")") }], waitUntilFinished: true)
            log.add("A-again:\(OperationQueue.current?.name ?? "nil")")
        }
        qa.waitUntilAllOperationsAreFinished()
        show("current.nested", log.take())
        show("current.outside", OperationQueue.current == nil ? "nil" : "some")
    }

    do {
        let q = OperationQueue()
        let name = q.name ?? "nil"
        show("name.default", name.hasPrefix("NSOperationQueue 0x") ? "NSOperationQueue 0x…" : name)
        q.name = "Q"
        q.name = nil
        show("name.set-nil", q.name ?? "nil")
        show("name.operation-default", BlockOperation {}.name ?? "nil")
    }

    do {
        let main = OperationQueue.main
        show("main.properties", [main.name ?? "nil", "\(main.maxConcurrentOperationCount)",
                                 "\(main.qualityOfService.rawValue)", "\(main.isSuspended)"])
        main.maxConcurrentOperationCount = 4
        show("main.width-after-set", main.maxConcurrentOperationCount)
    }

    do {
        // Quality of service orders operations that have no priority of their own.
        let q = OperationQueue()
        q.maxConcurrentOperationCount = 1
        q.isSuspended = true
        let classes: [(String, QualityOfService)] = [("bg", .background), ("ui", .userInteractive),
                                                     ("ut", .utility), ("in", .userInitiated), ("df", .default)]
        for (name, qos) in classes {
            let op = BlockOperation { log.add(name) }
            op.qualityOfService = qos
            q.addOperation(op)
        }
        q.isSuspended = false
        q.waitUntilAllOperationsAreFinished()
        show("qos.orders-a-serial-queue", log.take())
    }

    do {
        let q = OperationQueue()
        q.addOperations([], waitUntilFinished: true)
        show("add.empty-batch-waiting", q.operationCount)
        q.isSuspended = true
        let op = BlockOperation {}
        q.addOperation(op)
        show("add.ready-in-suspended-queue", [op.isReady, op.isExecuting])
        q.cancelAllOperations()
        q.isSuspended = false
        q.waitUntilAllOperationsAreFinished()
        show("add.cancelled-then-drained", [op.isFinished, op.isCancelled])
    }

    do {
        let q = OperationQueue()
        let key = DispatchSpecificKey<String>()
        let dq = DispatchQueue(label: "underlying")
        dq.setSpecific(key: key, value: "underlying")
        q.underlyingQueue = dq
        q.addOperation { log.add(DispatchQueue.getSpecific(key: key) ?? "nil") }
        q.waitUntilAllOperationsAreFinished()
        show("underlying.runs-there", log.take())
    }

    do {
        let q = OperationQueue()
        q.qualityOfService = .utility
        q.isSuspended = true
        let a = BlockOperation {}
        q.addOperation(a)
        show("qos.operation-property-in-utility-queue", a.qualityOfService.rawValue)
        q.isSuspended = false
        q.waitUntilAllOperationsAreFinished()
    }

    // The progress scenarios run their operations one at a time. Foundation on Linux's
    // `Progress` takes no lock: two operations of a progress-reporting queue that run at
    // once add and remove children of the queue's progress from two threads, and that
    // race corrupts its set of children and crashes the Foundation side. Spindle
    // serialises its own updates, and its suite checks them with operations that run at
    // once (`testProgressOfOperationsThatRunAtOnceCountsEachOfThem`).
    do {
        let q = OperationQueue()
        q.maxConcurrentOperationCount = 1
        q.isSuspended = true
        q.progress.totalUnitCount = 4
        for _ in 0..<3 { q.addOperation {} }
        show("progress.before", [q.progress.totalUnitCount, q.progress.completedUnitCount])
        q.isSuspended = false
        q.waitUntilAllOperationsAreFinished()
        show("progress.after", [q.progress.totalUnitCount, q.progress.completedUnitCount])
    }

    do {
        // What progress counts: cancelled operations, and those added past the total.
        let q = OperationQueue()
        q.maxConcurrentOperationCount = 1
        q.isSuspended = true
        q.progress.totalUnitCount = 3
        let ops = (0..<4).map { _ in BlockOperation {} }
        q.addOperations(ops, waitUntilFinished: false)
        ops[1].cancel()
        q.isSuspended = false
        q.waitUntilAllOperationsAreFinished()
        show("progress.cancelled-and-extra", [q.progress.totalUnitCount, q.progress.completedUnitCount])
    }

    do {
        // Progress an operation makes while it runs is an implicit child of the
        // operation's own: one that finishes counts the operation's unit, one left
        // part-way does not, and what it reached shows in the queue's fraction.
        let q = OperationQueue()
        q.maxConcurrentOperationCount = 1
        q.isSuspended = true
        q.progress.totalUnitCount = 4
        q.addOperation { let steps = Progress(totalUnitCount: 8); steps.completedUnitCount = 8 }
        q.addOperation { let steps = Progress(totalUnitCount: 8); steps.completedUnitCount = 4 }
        q.addOperation { log.add("current:\(Progress.current() != nil)") }
        q.isSuspended = false
        q.waitUntilAllOperationsAreFinished()
        show("progress.implicit-children", [log.take(), "\(q.progress.completedUnitCount)", "\(q.progress.fractionCompleted)"])
    }

    do {
        // A queue's progress cancelled before its operations run: each operation's own
        // progress, current inside main(), says so.
        let q = OperationQueue()
        q.maxConcurrentOperationCount = 1
        q.isSuspended = true
        q.progress.totalUnitCount = 2
        q.progress.cancel()
        for _ in 0..<2 { q.addOperation { log.add("\(Progress.current()?.isCancelled ?? false)") } }
        q.isSuspended = false
        q.waitUntilAllOperationsAreFinished()
        show("progress.cancelled-before", [log.take(), "\(q.progress.completedUnitCount)"])
    }

    do {
        // A total of zero, set: the queue reports progress once its total is set, to
        // any value. Reading `progress` alone sets nothing.
        let read = OperationQueue()
        _ = read.progress.totalUnitCount
        read.addOperation { log.add("read:\(Progress.current() != nil)") }
        read.waitUntilAllOperationsAreFinished()
        let zero = OperationQueue()
        zero.progress.totalUnitCount = 0
        zero.addOperation { log.add("zero:\(Progress.current() != nil)") }
        zero.waitUntilAllOperationsAreFinished()
        show("progress.total-zero", [log.take(), "\(read.progress.completedUnitCount)", "\(zero.progress.completedUnitCount)"])
    }

    do {
        // The total set after the operations were added, before they run: they count.
        let q = OperationQueue()
        q.maxConcurrentOperationCount = 1
        q.isSuspended = true
        for _ in 0..<3 { q.addOperation {} }
        q.progress.totalUnitCount = 3
        q.isSuspended = false
        q.waitUntilAllOperationsAreFinished()
        show("progress.total-set-after-adding", [q.progress.totalUnitCount, q.progress.completedUnitCount])
    }

    do {
        let q = OperationQueue()
        let ran = DispatchSemaphore(value: 0)
        q.addBarrierBlock { log.add("barrier:\(OperationQueue.current === q)"); ran.signal() }
        ran.wait()
        show("barrier.on-empty-queue", log.take())
        q.isSuspended = true
        q.addOperation {}
        q.addBarrierBlock {}
        show("barrier.not-counted", q.operationCount)
        q.isSuspended = false
        q.waitUntilAllOperationsAreFinished()
    }

    do {
        // A barrier added to an empty queue that is suspended.
        let q = OperationQueue()
        q.isSuspended = true
        let ran = DispatchSemaphore(value: 0)
        q.addBarrierBlock { ran.signal() }
        let returned = bounded("barrier.on-empty-suspended-queue", 5) { ran.wait() }
        q.isSuspended = false
        returned.wait()
        q.waitUntilAllOperationsAreFinished()
    }

    do {
        // An operation that is never ready stays queued, cancelled or not.
        final class NeverReady: Operation, @unchecked Sendable {
            override var isReady: Bool { false }
            override func main() { log.add("main") }
        }
        let q = OperationQueue()
        let op = NeverReady()
        q.addOperation(op)
        op.cancel()
        bounded("never-ready.cancelled.wait", 0.2) { op.waitUntilFinished() }
        show("never-ready.cancelled", [log.take(), "\(op.isFinished)", "\(q.operationCount)"])
    }
}
