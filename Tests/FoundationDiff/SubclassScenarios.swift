#if SPINDLE
import Spindle
#else
import Foundation
#endif
import Dispatch

/// The asynchronous-operation template of Apple's guide: `start` begins the work and
/// returns, the work announces `isExecuting` and `isFinished` with `willChangeValue` and
/// `didChangeValue`, in one of the three forms code written for Foundation uses.
final class AsyncTemplate: Operation, @unchecked Sendable {
    /// How the changes are announced: the keys (`"isFinished"`), their short forms
    /// (`"finished"`), or key paths (`\.isFinished`).
    enum Announcing { case keys, shortKeys, keyPaths }
    private enum Flag { case executing, finished }

    // @unchecked: the two flags are only touched under `lock`.
    private let lock = NSLock()
    private var executing = false, finished = false
    private let announcing: Announcing
    let release = DispatchSemaphore(value: 0)

    init(_ announcing: Announcing = .keys) { self.announcing = announcing }

    private func key(_ flag: Flag) -> String {
        switch (flag, announcing) {
        case (.executing, .shortKeys): return "executing"
        case (.finished, .shortKeys): return "finished"
        case (.executing, _): return "isExecuting"
        case (.finished, _): return "isFinished"
        }
    }
    private func willChange(_ flag: Flag) {
        switch (flag, announcing) {
        case (.executing, .keyPaths): willChangeValue(for: \.isExecuting)
        case (.finished, .keyPaths): willChangeValue(for: \.isFinished)
        default: willChangeValue(forKey: key(flag))
        }
    }
    private func didChange(_ flag: Flag) {
        switch (flag, announcing) {
        case (.executing, .keyPaths): didChangeValue(for: \.isExecuting)
        case (.finished, .keyPaths): didChangeValue(for: \.isFinished)
        default: didChangeValue(forKey: key(flag))
        }
    }

    override var isAsynchronous: Bool { true }
    override var isExecuting: Bool { lock.lock(); defer { lock.unlock() }; return executing }
    override var isFinished: Bool { lock.lock(); defer { lock.unlock() }; return finished }
    override func start() {
        if isCancelled {
            willChange(.finished)
            lock.lock(); finished = true; lock.unlock()
            didChange(.finished)
            return
        }
        willChange(.executing)
        lock.lock(); executing = true; lock.unlock()
        didChange(.executing)
        Thread.detachNewThread { [self] in
            release.wait()
            log.add("work")
            willChange(.finished); willChange(.executing)
            lock.lock(); executing = false; finished = true; lock.unlock()
            didChange(.executing); didChange(.finished)
        }
    }
}

/// Readiness of its own, announced with `didChangeValue(forKey: "isReady")`.
final class Gated: Operation, @unchecked Sendable {
    // @unchecked: `open` is only touched under `lock`.
    private let lock = NSLock()
    private var open = false
    private let work: @Sendable () -> Void
    init(_ work: @escaping @Sendable () -> Void = { log.add("gated") }) { self.work = work }
    override var isReady: Bool { lock.lock(); defer { lock.unlock() }; return open && super.isReady }
    func openGate() {
        willChangeValue(forKey: "isReady")
        lock.lock(); open = true; lock.unlock()
        didChangeValue(forKey: "isReady")
    }
    override func main() { work() }
}

/// Subclasses in the shapes code written for Foundation uses.
func subclassScenarios() {
    do {
        let q = OperationQueue()
        let op = AsyncTemplate()
        let dependent = BlockOperation { log.add("dependent") }
        dependent.addDependency(op)
        q.addOperations([op, dependent], waitUntilFinished: false)
        while !op.isExecuting { usleep(1000) }
        show("async-template.while-working", [op.isExecuting, op.isFinished, dependent.isReady, dependent.isFinished])
        show("async-template.count-while-working", q.operationCount)
        op.release.signal()
        q.waitUntilAllOperationsAreFinished()
        show("async-template.after", [log.take(), "\(op.isExecuting)", "\(op.isFinished)"])
    }

    do {
        let q = OperationQueue()
        let op = AsyncTemplate(.shortKeys)
        let dependent = BlockOperation { log.add("dependent") }
        dependent.addDependency(op)
        q.addOperations([op, dependent], waitUntilFinished: false)
        op.release.signal()
        bounded("short-keys.wait", 2) { dependent.waitUntilFinished() }
        // The count once the queue has drained: read right after the wait, it races in
        // Foundation's own queue, which counts an operation out after it is finished.
        bounded("short-keys.drain", 10) { q.waitUntilAllOperationsAreFinished() }
        show("short-keys", [log.take(), "\(op.isFinished)", "\(q.operationCount)"])
    }

    do {
        let q = OperationQueue()
        let op = AsyncTemplate(.keyPaths)
        let dependent = BlockOperation { log.add("dependent") }
        dependent.addDependency(op)
        q.addOperations([op, dependent], waitUntilFinished: false)
        while !op.isExecuting { usleep(1000) }
        show("key-paths.while-working", [op.isExecuting, op.isFinished, dependent.isReady])
        op.release.signal()
        bounded("key-paths.wait", 10) { dependent.waitUntilFinished() }
        bounded("key-paths.drain", 10) { q.waitUntilAllOperationsAreFinished() }
        show("key-paths", [log.take(), "\(op.isFinished)", "\(q.operationCount)"])
    }

    do {
        let op = AsyncTemplate()
        addCancelledWhileSuspended([op], cancelling: op)
        show("async-template.cancelled-before-start", [log.take(), "\(op.isFinished)", "\(op.isCancelled)"])
    }

    do {
        let q = OperationQueue()
        let op = Gated()
        q.addOperation(op)
        let waited = bounded("custom-readiness.closed.wait", 0.1) { op.waitUntilFinished() }
        show("custom-readiness.closed", [log.take(), "\(op.isReady)", "\(op.isFinished)"])
        op.openGate()
        waited.wait()
        show("custom-readiness.opened", [log.take(), "\(op.isFinished)"])
    }

    do {
        // A dependency cycle is legal; cancelling one of its operations breaks it.
        let q = OperationQueue()
        let a = BlockOperation { log.add("a") }, b = BlockOperation { log.add("b") }
        a.addDependency(b); b.addDependency(a)
        q.addOperations([a, b], waitUntilFinished: false)
        show("cycle.ready", [a.isReady, b.isReady])
        a.cancel()
        q.waitUntilAllOperationsAreFinished()
        show("cycle.after-cancelling-one", [log.take(), "\(a.isFinished)", "\(b.isFinished)"])
    }

    do {
        // Removing the only unfinished dependency of a queued operation.
        let q = OperationQueue()
        let dep = BlockOperation {}
        let op = BlockOperation { log.add("ran") }
        op.addDependency(dep)
        q.addOperation(op)
        op.removeDependency(dep)
        bounded("remove-dependency.wait", 2) { op.waitUntilFinished() }
        show("remove-dependency.starts-it", [log.take(), "\(op.isReady)"])
    }
}

/// An asynchronous operation whose `start` finishes it before returning, as one does
/// when its result is already at hand; `announcesExecuting` false leaves out the
/// `isExecuting` notifications.
final class FinishesInStart: Operation, @unchecked Sendable {
    // @unchecked: `finished` is only touched under `lock`.
    private let lock = NSLock()
    private var finished = false
    let announcesExecuting: Bool
    init(announcesExecuting: Bool) { self.announcesExecuting = announcesExecuting }
    override var isAsynchronous: Bool { true }
    override var isExecuting: Bool { false }
    override var isFinished: Bool { lock.lock(); defer { lock.unlock() }; return finished }
    override func start() {
        log.add("start")
        if announcesExecuting { willChangeValue(forKey: "isExecuting"); didChangeValue(forKey: "isExecuting") }
        willChangeValue(forKey: "isFinished")
        lock.lock(); finished = true; lock.unlock()
        didChangeValue(forKey: "isFinished")
    }
}

/// Asynchronous operations finished inside their own `start`, with and without the
/// `isExecuting` notifications: their dependents, their completion blocks and the work
/// added after them.
func earlyFinishScenarios() {
    for (name, op) in [("with-executing", FinishesInStart(announcesExecuting: true)),
                       ("without-executing", FinishesInStart(announcesExecuting: false))] {
        let q = OperationQueue()
        let dependent = BlockOperation { log.add("dependent") }
        dependent.addDependency(op)
        let done = DispatchSemaphore(value: 0)
        op.completionBlock = { log.add("completion"); done.signal() }
        q.addOperations([op, dependent], waitUntilFinished: true)
        done.wait()
        show("finish-in-start.\(name)", log.take().split(separator: " ").sorted().joined(separator: ","))
        q.addOperations([BlockOperation { log.add("later") }], waitUntilFinished: true)
        // (Not the count: Foundation on Linux may still count an operation that the
        // wait has seen finish.)
        show("finish-in-start.\(name).after", log.take())
    }
}
