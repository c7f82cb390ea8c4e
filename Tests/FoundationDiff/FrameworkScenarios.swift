#if SPINDLE
import Spindle
#else
import Foundation
#endif
import Dispatch

// Programs built on the operation framework of Framework.swift, compared with
// Foundation: what its state machine, conditions, exclusive categories, produced
// operations and groups make a queue do.

// MARK: - Conditions and operations the scenarios use

struct Exclusive: FrameworkCondition {
    let category: String
    var name: String { "exclusive" }
    var exclusiveCategory: String? { category }
    func dependency(for op: FrameworkOperation) -> Operation? { nil }
    func evaluate(for op: FrameworkOperation, _ done: @escaping @Sendable (Bool) -> Void) { done(true) }
}

/// Holds or fails, answered from another thread, as a condition that asks a service does.
struct Answers: FrameworkCondition {
    let holds: Bool
    var name: String { holds ? "holds" : "fails" }
    var exclusiveCategory: String? { nil }
    func dependency(for op: FrameworkOperation) -> Operation? { nil }
    func evaluate(for op: FrameworkOperation, _ done: @escaping @Sendable (Bool) -> Void) {
        let holds = self.holds
        DispatchQueue.global().async { done(holds) }
    }
}

struct Negated: FrameworkCondition {
    let inner: any FrameworkCondition
    var name: String { "not-\(inner.name)" }
    var exclusiveCategory: String? { nil }
    func dependency(for op: FrameworkOperation) -> Operation? { inner.dependency(for: op) }
    func evaluate(for op: FrameworkOperation, _ done: @escaping @Sendable (Bool) -> Void) {
        inner.evaluate(for: op) { done(!$0) }
    }
}

/// Needs a step of its own first, as a "signed in" condition needs a sign-in.
struct Requires: FrameworkCondition {
    let step: String
    var name: String { "requires-\(step)" }
    var exclusiveCategory: String? { nil }
    func dependency(for op: FrameworkOperation) -> Operation? { Step(step) }
    func evaluate(for op: FrameworkOperation, _ done: @escaping @Sendable (Bool) -> Void) { done(true) }
}

/// Logs its name as its work, and finishes at once or, `later`, on another thread once
/// released.
final class Step: FrameworkOperation, @unchecked Sendable {
    let label: String
    let later: Bool
    let release = DispatchSemaphore(value: 0)
    let produces: [Operation]
    init(_ label: String, later: Bool = false, produces: [Operation] = []) {
        self.label = label
        self.later = later
        self.produces = produces
        super.init()
        name = label
    }
    override func execute() {
        log.add(label)
        for op in produces { produce(op) }
        guard later else { finish(); return }
        Thread.detachNewThread { [self] in
            release.wait()
            log.add("\(label)-done")
            finish()
        }
    }
}

/// Logs each start and finish of the operation it is given to, with the finish's errors.
func watched<T: FrameworkOperation>(_ op: T) -> T {
    op.addObserver(FrameworkObserver(
        didStart: { log.add("start:\($0.name ?? "?")") },
        didFinish: { op, errors in log.add("finish:\(op.name ?? "?")\(errors.isEmpty ? "" : "\(errors)")") }))
    return op
}

func summary(_ op: FrameworkOperation) -> String {
    "cancelled=\(op.isCancelled) finished=\(op.isFinished) state=\(op.state)"
}

// MARK: - Scenarios

func frameworkScenarios() {
    do {
        let q = FrameworkQueue()
        let a = watched(Step("a"))
        q.addOperation(a)
        q.waitUntilAllOperationsAreFinished()
        show("framework.plain", [log.take(), summary(a), "\(q.operationCount)"])
    }
    do {
        // Finished on another thread, long after `super.start()` returned.
        let q = FrameworkQueue()
        let a = watched(Step("a", later: true))
        let after = named("after") { log.add("after") }
        after.addDependency(a)
        q.addOperations([a, after], waitUntilFinished: false)
        while a.state != .executing { usleep(1000) }
        show("framework.later.while-working", [a.isExecuting, a.isFinished, after.isReady, after.isFinished])
        show("framework.later.count-while-working", q.operationCount)
        a.release.signal()
        q.waitUntilAllOperationsAreFinished()
        show("framework.later", [log.take(), summary(a), "\(after.isFinished)"])
    }
    do {
        // One category on a wide queue: one at a time, in the order added, the others
        // unaffected.
        let q = FrameworkQueue()
        q.isSuspended = true
        let steps = (1...4).map { i -> Step in
            let s = Step("e\(i)")
            s.addCondition(Exclusive(category: "alerts"))
            return s
        }
        let free = Step("free")
        for s in steps { q.addOperation(s) }
        q.addOperation(free)
        show("framework.exclusive.dependencies", steps.map { $0.dependencies.count })
        q.isSuspended = false
        q.waitUntilAllOperationsAreFinished()
        let order = log.take().split(separator: " ").filter { $0 != "free" }
        show("framework.exclusive", [order.joined(separator: " "), "\(free.isFinished)"])
    }
    do {
        // Two categories: waits for the last of each.
        let q = FrameworkQueue()
        q.isSuspended = true
        let x = Step("x"), y = Step("y"), both = Step("both")
        x.addCondition(Exclusive(category: "left"))
        y.addCondition(Exclusive(category: "right"))
        both.addCondition(Exclusive(category: "left"))
        both.addCondition(Exclusive(category: "right"))
        q.addOperations([x, y, both], waitUntilFinished: false)
        show("framework.two-categories.dependencies", names(both.dependencies))
        q.isSuspended = false
        q.waitUntilAllOperationsAreFinished()
        show("framework.two-categories", log.take().split(separator: " ").last.map(String.init) ?? "")
    }
    do {
        // A condition that fails: cancelled with its error, never run, and what waits
        // for it runs.
        let q = FrameworkQueue()
        let a = watched(Step("a"))
        a.addCondition(Answers(holds: false))
        let after = named("after") { log.add("after") }
        after.addDependency(a)
        q.addOperations([a, after], waitUntilFinished: true)
        show("framework.failing-condition", [log.take(), summary(a), "\(a.errors)"])
    }
    do {
        let q = FrameworkQueue()
        let a = watched(Step("a")), b = watched(Step("b")), c = watched(Step("c"))
        a.addCondition(Answers(holds: true))
        b.addCondition(Negated(inner: Answers(holds: false)))
        c.addCondition(Negated(inner: Answers(holds: true)))
        c.addCondition(Answers(holds: true))
        for op in [a, b, c] { q.addOperation(op); op.waitUntilFinished() }
        q.waitUntilAllOperationsAreFinished()
        show("framework.conditions", [log.take(), summary(a), summary(b), summary(c), "\(c.errors)"])
    }
    do {
        // A condition's own step runs first.
        let q = FrameworkQueue()
        let a = watched(Step("a"))
        a.addCondition(Requires(step: "sign-in"))
        q.addOperation(a)
        show("framework.requires.dependencies", names(a.dependencies))
        q.waitUntilAllOperationsAreFinished()
        show("framework.requires", [log.take(), summary(a), "\(q.operationCount)"])
    }
    do {
        // Cancelled while it waits for a dependency in another, suspended queue: ready,
        // and finished, without it.
        let q = FrameworkQueue()
        let held = OperationQueue()
        held.isSuspended = true
        let gate = named("gate") { log.add("gate") }
        let a = watched(Step("a"))
        a.addDependency(gate)
        held.addOperation(gate)
        q.addOperation(a)
        show("framework.cancel-pending.before", [a.isReady, a.state == .pending || a.state == .evaluating])
        a.cancel()
        a.waitUntilFinished()
        show("framework.cancel-pending", [log.take(), summary(a), "\(gate.isFinished)"])
        held.isSuspended = false
        held.waitUntilAllOperationsAreFinished()
        show("framework.cancel-pending.after", log.take())
    }
    do {
        // Cancelled before it is added: finishes at once, never starts.
        let q = FrameworkQueue()
        let a = watched(Step("a"))
        a.cancel()
        show("framework.cancel-before-add.ready", a.isReady)
        q.addOperation(a)
        q.waitUntilAllOperationsAreFinished()
        show("framework.cancel-before-add", [log.take(), summary(a)])
    }
    do {
        // A group: its children in order, then its own finish, then what waits for it.
        let q = FrameworkQueue()
        let c1 = Step("c1"), c2 = Step("c2"), c3 = Step("c3")
        c2.addDependency(c1)
        c3.addDependency(c2)
        let group = watched(GroupOperation([c1, c2, c3]))
        group.name = "group"
        let after = named("after") { log.add("after") }
        after.addDependency(group)
        q.addOperations([group, after], waitUntilFinished: false)
        q.waitUntilAllOperationsAreFinished()
        show("framework.group", [log.take(), summary(group)])
    }
    do {
        // A child that produces another: the group waits for that one too.
        let q = FrameworkQueue()
        let extra = Step("extra", later: true)
        let producer = Step("producer", produces: [extra])
        let group = watched(GroupOperation([producer]))
        group.name = "group"
        q.addOperation(group)
        while extra.state != .executing { usleep(1000) }
        show("framework.group-produce.while-extra-works", group.isFinished)
        extra.release.signal()
        q.waitUntilAllOperationsAreFinished()
        show("framework.group-produce", [log.take(), summary(group)])
    }
    do {
        // Children that fail their conditions: the group finishes with their errors.
        let q = FrameworkQueue()
        let bad = Step("bad"), good = Step("good")
        bad.addCondition(Answers(holds: false))
        let group = watched(GroupOperation([bad, good]))
        group.name = "group"
        q.addOperation(group)
        q.waitUntilAllOperationsAreFinished()
        let order = log.take().split(separator: " ").sorted().joined(separator: " ")
        show("framework.group-errors", [order, summary(group), "\(group.errors)"])
    }
    do {
        // Cancelled before it runs: its children never run, and it finishes cancelled.
        let child = Step("child")
        let group = watched(GroupOperation([child]))
        group.name = "group"
        let after = named("after") { log.add("after") }
        after.addDependency(group)
        addCancelledWhileSuspended([group, after], cancelling: group, to: FrameworkQueue())
        show("framework.group-cancelled", [log.take(), summary(group), "\(child.isCancelled)", "\(child.isFinished)"])
    }
    do {
        // A group in a group, added to from outside while the inner one waits.
        let q = FrameworkQueue()
        let deep = Step("deep", later: true)
        let innerGroup = watched(GroupOperation([deep]))
        innerGroup.name = "inner"
        let outerGroup = watched(GroupOperation([innerGroup]))
        outerGroup.name = "outer"
        q.addOperation(outerGroup)
        while deep.state != .executing { usleep(1000) }
        let late = Step("late")
        innerGroup.addChild(late)
        show("framework.nested.while-deep-works", [innerGroup.isFinished, outerGroup.isFinished])
        deep.release.signal()
        q.waitUntilAllOperationsAreFinished()
        show("framework.nested", [log.take().split(separator: " ").sorted().joined(separator: " "),
                                  summary(innerGroup), summary(outerGroup), "\(late.isFinished)"])
    }
}
