#if SPINDLE
import Spindle
#else
import Foundation
#endif
import Dispatch

// An operation framework in the shape of the one Apple presented with "Advanced
// NSOperations" (WWDC 2015), which many apps and libraries took up: operations with a
// state machine of their own, conditions evaluated before an operation becomes ready,
// observers, mutually exclusive categories, operations that produce others, and groups
// that run their children on a queue of their own. It is written as such code is on
// Linux, where there is no key-value observing: each change of readiness, execution and
// finish is announced on the operation's own keys with `willChangeValue(forKey:)` and
// `didChangeValue(forKey:)`.
//
// What it leans on, and what FrameworkScenarios.swift therefore compares with Foundation:
// - `start` calls `super.start()`, which runs `main`, on an operation that overrides
//   `isExecuting` and `isFinished` without saying it is asynchronous: the queue must go
//   by the overrides, not by what `super.start()` did;
// - `isReady` starts evaluating the conditions when the queue asks it and the
//   dependencies are done, and the evaluation announces readiness later, from another
//   thread;
// - dependencies are added by a queue subclass's `addOperation(_:)`, on operations that
//   are about to be added, some of them to other operations already in the queue;
// - a cancelled operation is ready whatever its dependencies, and its `start` finishes it;
// - a group's inner queue is suspended until the group runs, and a `completionBlock`
//   tells the group which of its children finished.

/// Something an operation needs before it runs.
protocol FrameworkCondition: Sendable {
    var name: String { get }
    /// Operations that share a category run one at a time, in the order they were added.
    var exclusiveCategory: String? { get }
    /// Work that makes the condition true, run before the operation (nil: none).
    func dependency(for op: FrameworkOperation) -> Operation?
    /// Whether the condition holds: `done` is called once, from any thread.
    func evaluate(for op: FrameworkOperation, _ done: @escaping @Sendable (Bool) -> Void)
}

/// Told when an operation starts, produces another operation, and finishes.
struct FrameworkObserver: Sendable {
    var didStart: @Sendable (FrameworkOperation) -> Void = { _ in }
    var didProduce: @Sendable (FrameworkOperation, Operation) -> Void = { _, _ in }
    var didFinish: @Sendable (FrameworkOperation, [String]) -> Void = { _, _ in }
}

class FrameworkOperation: Operation, @unchecked Sendable {
    enum State: Int { case initialized, pending, evaluating, ready, executing, finishing, finished }

    // @unchecked: the fields below are only touched under `lock`.
    private let lock = NSLock()
    private var current = State.initialized
    private var conditionList: [any FrameworkCondition] = []
    private var observerList: [FrameworkObserver] = []
    private var errorList: [String] = []
    private var finishCalled = false

    var state: State { lock.lock(); defer { lock.unlock() }; return current }
    var conditions: [any FrameworkCondition] { lock.lock(); defer { lock.unlock() }; return conditionList }
    var errors: [String] { lock.lock(); defer { lock.unlock() }; return errorList }
    private var observers: [FrameworkObserver] { lock.lock(); defer { lock.unlock() }; return observerList }

    /// Moves the state forward to `new` (never back), announcing `keys` around the move.
    private func advance(to new: State, announcing keys: [String]) {
        for key in keys { willChangeValue(forKey: key) }
        lock.lock()
        if new.rawValue > current.rawValue { current = new }
        lock.unlock()
        for key in keys.reversed() { didChangeValue(forKey: key) }
    }

    func addCondition(_ condition: any FrameworkCondition) {
        lock.lock(); conditionList.append(condition); lock.unlock()
    }

    func addObserver(_ observer: FrameworkObserver) {
        lock.lock(); observerList.append(observer); lock.unlock()
    }

    /// Called by `FrameworkQueue` as it adds the operation.
    func willEnqueue() { advance(to: .pending, announcing: ["isReady"]) }

    override var isReady: Bool {
        switch state {
        case .initialized:
            return isCancelled
        case .pending:
            if isCancelled { return true }
            if super.isReady { evaluateConditions() }
            return false
        case .ready:
            return super.isReady || isCancelled
        default:
            return false
        }
    }

    override var isExecuting: Bool { state == .executing }
    override var isFinished: Bool { state == .finished }

    private func evaluateConditions() {
        lock.lock()
        guard current == .pending else { lock.unlock(); return }
        current = .evaluating
        let conditions = conditionList
        lock.unlock()
        let group = DispatchGroup()
        let failures = Log()
        for condition in conditions {
            group.enter()
            condition.evaluate(for: self) { holds in
                if !holds { failures.add(condition.name) }
                group.leave()
            }
        }
        group.notify(queue: .global()) { [self] in
            let failed = failures.take()
            if !failed.isEmpty { cancel(withError: "\(failed) failed") }
            advance(to: .ready, announcing: ["isReady"])
        }
    }

    override final func start() {
        super.start()
        if isCancelled { finish() }
    }

    override final func main() {
        if errors.isEmpty && !isCancelled {
            advance(to: .executing, announcing: ["isExecuting"])
            for observer in observers { observer.didStart(self) }
            execute()
        } else {
            finish()
        }
    }

    /// The work: subclasses call `finish` when it is done, before returning or later.
    func execute() { finish() }

    /// Hands `op` to the observers, whose queue adds it.
    final func produce(_ op: Operation) {
        for observer in observers { observer.didProduce(self, op) }
    }

    final func cancel(withError error: String) {
        lock.lock(); errorList.append(error); lock.unlock()
        cancel()
    }

    final func finish(_ more: [String] = []) {
        lock.lock()
        if finishCalled { lock.unlock(); return }
        finishCalled = true
        errorList += more
        let all = errorList
        lock.unlock()
        advance(to: .finishing, announcing: ["isExecuting"])
        for observer in observers { observer.didFinish(self, all) }
        advance(to: .finished, announcing: ["isFinished"])
    }
}

/// Told what a `FrameworkQueue` is given and what finished in it.
protocol FrameworkQueueDelegate: AnyObject, Sendable {
    func queue(_ queue: FrameworkQueue, willAdd op: Operation)
    func queue(_ queue: FrameworkQueue, didFinish op: Operation, errors: [String])
}

/// Ties the categories' operations together: each waits for the last one added before it.
final class ExclusivityController: @unchecked Sendable {
    static let shared = ExclusivityController()
    // @unchecked: `lines` is only touched under `lock`.
    private let lock = NSLock()
    private var lines: [String: [Operation]] = [:]

    func add(_ op: Operation, categories: [String]) {
        lock.lock(); defer { lock.unlock() }
        for category in categories {
            if let last = lines[category]?.last { op.addDependency(last) }
            lines[category, default: []].append(op)
        }
    }

    func remove(_ op: Operation, categories: [String]) {
        lock.lock(); defer { lock.unlock() }
        for category in categories { lines[category]?.removeAll { $0 === op } }
    }
}

final class FrameworkQueue: OperationQueue, @unchecked Sendable {
    // @unchecked: `held` is only touched under `lock`.
    private let lock = NSLock()
    private weak var held: (any FrameworkQueueDelegate)?
    var delegate: (any FrameworkQueueDelegate)? {
        get { lock.lock(); defer { lock.unlock() }; return held }
        set { lock.lock(); held = newValue; lock.unlock() }
    }

    override func addOperation(_ op: Operation) {
        if let op = op as? FrameworkOperation {
            op.addObserver(FrameworkObserver(
                didProduce: { [weak self] _, produced in self?.addOperation(produced) },
                didFinish: { [weak self] finished, errors in
                    guard let self else { return }
                    self.delegate?.queue(self, didFinish: finished, errors: errors)
                }))
            let conditions = op.conditions
            for needed in conditions.compactMap({ $0.dependency(for: op) }) {
                op.addDependency(needed)
                addOperation(needed)
            }
            let categories = conditions.compactMap(\.exclusiveCategory)
            if !categories.isEmpty {
                ExclusivityController.shared.add(op, categories: categories)
                op.addObserver(FrameworkObserver(didFinish: { finished, _ in
                    ExclusivityController.shared.remove(finished, categories: categories)
                }))
            }
            op.willEnqueue()
        } else {
            let previous = op.completionBlock
            op.completionBlock = { [weak self, weak op] in
                previous?()
                guard let self, let op else { return }
                self.delegate?.queue(self, didFinish: op, errors: [])
            }
        }
        delegate?.queue(self, willAdd: op)
        super.addOperation(op)
    }

    override func addOperations(_ ops: [Operation], waitUntilFinished wait: Bool) {
        for op in ops { addOperation(op) }
        if wait { for op in ops { op.waitUntilFinished() } }
    }
}

/// Runs its children on a queue of its own, suspended until the group runs, and finishes
/// once they all have, with their errors.
class GroupOperation: FrameworkOperation, FrameworkQueueDelegate, @unchecked Sendable {
    let inner = FrameworkQueue()
    private let opening = BlockOperation {}
    private let closing = BlockOperation {}
    // @unchecked: `collected` is only touched under `groupLock`.
    private let groupLock = NSLock()
    private var collected: [String] = []

    init(_ children: [Operation]) {
        super.init()
        inner.isSuspended = true
        inner.delegate = self
        inner.addOperation(opening)
        for child in children { inner.addOperation(child) }
    }

    override func cancel() {
        inner.cancelAllOperations()
        super.cancel()
    }

    override func execute() {
        inner.isSuspended = false
        inner.addOperation(closing)
    }

    func addChild(_ op: Operation) { inner.addOperation(op) }

    func queue(_ queue: FrameworkQueue, willAdd op: Operation) {
        if op !== closing { closing.addDependency(op) }
        if op !== opening { op.addDependency(opening) }
    }

    func queue(_ queue: FrameworkQueue, didFinish op: Operation, errors: [String]) {
        groupLock.lock()
        collected += errors
        let all = collected
        groupLock.unlock()
        if op === closing {
            inner.isSuspended = true
            finish(all)
        }
    }
}
