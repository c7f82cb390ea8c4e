import CSpindle
import CSpindleTesting
import Dispatch
import Foundation
import Synchronization
import XCTest
@testable import Spindle

// P2's skip: a wait on a narrow queue in which nothing can be below its class, and
// what keeps the operations it skipped from falling below it afterwards.
extension PromotionTests {
    /// A wait at a class no operation of the queue can be below leaves the queue
    /// unwalked: the operations ahead of the awaited one keep no floor. (Each wait
    /// walking everything ahead of its operation made n waits on a narrow queue cost
    /// n²/2 visits.) A wait at a higher class still walks and raises them.
    func testAWaitAtTheQueuesOwnClassDoesNotWalkTheQueue() async throws {
        let q = OperationQueue()
        q.maxConcurrentOperationCount = 1
        q.isSuspended = true
        let ops = (0..<50).map { _ in BlockOperation {} }
        for op in ops { q.addOperation(op) }
        let last = ops[ops.count - 1]
        let medium = Task(priority: .medium) { await last.finished() }
        XCTAssertTrue(eventually { q.state.locked { $0.skippedWaitRank } == ClassRank.of(QualityOfService.default) },
                      "the wait did not reach the queue")
        XCTAssertTrue(ops.dropLast().allSatisfy { $0.promotedRank.load(ordering: .relaxed) == 0 },
                      "a wait at the queue's own class walked the operations ahead")
        let high = Task(priority: .high) { await last.finished() }
        XCTAssertTrue(eventually { ops.dropLast().allSatisfy { $0.promotedRank.load(ordering: .relaxed) == ClassRank.of(QualityOfService.userInitiated) } },
                      "a wait above the queue's class did not raise the operations ahead")
        q.isSuspended = false
        await medium.value
        await high.value
    }

    /// What a skipped wait leaves behind it cannot fall below it afterwards: an
    /// operation ahead given a lower class of its own, or the queue given a lower class,
    /// is raised to the wait's class (P2).
    func testWhatASkippedWaitWaitsBehindIsRaisedIfItsClassDrops() async throws {
        let release = holdWorkers(of: .background)
        defer { release() }
        await assertRaisedAfterASkippedWait(release, "an operation ahead given a class of its own below the wait's") {
            _, ahead in ahead.qualityOfService = .background
        }
        await assertRaisedAfterASkippedWait(release, "the queue's own class lowered below the wait's") {
            q, _ in q.qualityOfService = .background
        }
    }

    /// A serial queue holding `ahead` and then the awaited operation, suspended; a
    /// medium-priority wait on the awaited one skips the queue (P2); then `drop` lowers
    /// a class, and the operation ahead must run at the wait's class all the same.
    private func assertRaisedAfterASkippedWait(_ release: @Sendable () -> Void, _ what: String,
                                               drop: (OperationQueue, BlockOperation) -> Void,
                                               file: StaticString = #filePath, line: UInt = #line) async {
        let rank = ClassRank.of(QualityOfService.default)
        let q = OperationQueue()
        q.maxConcurrentOperationCount = 1
        q.isSuspended = true
        let r = Recorder()
        let ahead = BlockOperation { r.record() }
        let awaited = BlockOperation {}
        q.addOperation(ahead)
        q.addOperation(awaited)
        let waiting = Task(priority: .medium) { await awaited.finished() }
        XCTAssertTrue(eventually { q.state.locked { $0.skippedWaitRank } == rank },
                      "\(what): the wait did not reach the queue", file: file, line: line)
        drop(q, ahead)
        XCTAssertEqual(ahead.promotedRank.load(ordering: .relaxed), rank,
                       "\(what): the operation ahead was left below the wait", file: file, line: line)
        await resumeAndAssertRanAtTheWaitsClass(q, awaited: awaited, waiting: waiting, r, release, what, file: file, line: line)
    }
}

extension PromotionTests {
    /// Waits above a narrow queue's class, one behind the other, each stop at the
    /// floor the wait before them raised (P2): n waits collect about n operations from
    /// the queue in all, not n²/2.
    func testWaitsAboveTheQueuesClassWalkEachOperationAheadOnce() async throws {
        let q = OperationQueue()
        q.maxConcurrentOperationCount = 1
        q.isSuspended = true
        let n = 200
        let ops = (0..<n).map { _ in BlockOperation {} }
        for op in ops { q.addOperation(op) }
        let high = ClassRank.of(QualityOfService.userInitiated)
        let before = PromotionCounters.walked.load(ordering: .relaxed)
        var waits: [Task<Void, Never>] = []
        for op in ops {
            waits.append(Task(priority: .high) { await op.finished() })
            // One at a time: each wait has raised its operation before the next begins.
            XCTAssertTrue(eventually { op.promotedRank.load(ordering: .relaxed) == high }, "a wait did not raise its operation")
        }
        let walked = PromotionCounters.walked.load(ordering: .relaxed) - before
        XCTAssertLessThanOrEqual(walked, 2 * n, "\(n) waits collected \(walked) operations from the queue")
        XCTAssertTrue(ops.allSatisfy { $0.promotedRank.load(ordering: .relaxed) == high })
        q.isSuspended = false
        for w in waits { await w.value }
    }
}

extension PromotionTests {
    /// An operation given a lower class of its own after it was queued counts for a
    /// wait for the whole queue, which promotes the queue's operations below the
    /// waiter's class: the queue notes it (`noteOwnClass`), as it notes one added with
    /// a class of its own.
    func testAClassSetAfterTheAddCountsForAWaitForTheWholeQueue() async throws {
        let release = holdWorkers(of: .background)
        defer { release() }
        let q = OperationQueue()
        q.isSuspended = true
        let r = Recorder()
        let op = BlockOperation { r.record() }
        q.addOperation(op)
        op.qualityOfService = .background
        let waiting = Task(priority: .medium) { await q.allOperationsFinished() }
        XCTAssertTrue(eventually { op.promotedRank.load(ordering: .relaxed) == ClassRank.of(QualityOfService.default) },
                      "the wait for the queue left an operation given a lower class after its add below it")
        await resumeAndAssertRanAtTheWaitsClass(q, awaited: op, waiting: waiting, r, release, "a wait for the whole queue",
                                                recorded: "the operation given a lower class after its add")
    }
}

// An add whose operation already has a floor (a wait or a dependent reached it before
// its add), and a queue made narrower: the operations it now waits behind rise to it.
extension PromotionTests {
    /// An operation waited for at a class before its add, added to a serial queue of that
    /// class, raises what is ahead of it to that class: an operation ahead with a lower
    /// class of its own, or, once the queue is given a lower class, every operation ahead.
    func testAnAddWithAFloorRaisesWhatIsAheadOfIt() async throws {
        let release = holdWorkers(of: .background)
        defer { release() }
        await assertRaisedAheadOfAWaitedAdd(release, "an operation ahead with a class of its own below the wait's",
                                            before: { _, ahead in ahead.qualityOfService = .background })
        await assertRaisedAheadOfAWaitedAdd(release, "the queue's own class lowered below the wait's after the add",
                                            after: { q, _ in q.qualityOfService = .background })
    }

    /// A queue made serial while it holds an operation waited for above the queue's class
    /// raises the operations ahead of that one, which it now waits behind, to the wait's
    /// class; and so does the queue's class lowered below a wait it stood in for then.
    func testAQueueMadeNarrowerRaisesWhatAWaitedOperationNowWaitsBehind() async throws {
        let release = holdWorkers(of: .background)
        defer { release() }
        await assertRaisedAheadAfterNarrowing(release, "the queue below the wait's class", queueClass: .background)
        await assertRaisedAheadAfterNarrowing(release, "the queue at the wait's class, then lowered", queueClass: .default,
                                              after: { $0.qualityOfService = .background })
    }

    /// A queue of unlimited width and class `queueClass`, suspended, holding `ahead` and
    /// `awaited`; a medium-priority wait on `awaited` (which walks nothing: nothing waits
    /// behind anything yet); the queue is made serial, then `after` runs; `ahead` must
    /// run at the wait's class.
    private func assertRaisedAheadAfterNarrowing(_ release: @Sendable () -> Void, _ what: String,
                                                 queueClass: QualityOfService,
                                                 after: (OperationQueue) -> Void = { _ in },
                                                 file: StaticString = #filePath, line: UInt = #line) async {
        let rank = ClassRank.of(QualityOfService.default)
        let q = OperationQueue()
        q.qualityOfService = queueClass
        q.isSuspended = true
        let r = Recorder()
        let ahead = BlockOperation { r.record() }
        let awaited = BlockOperation {}
        q.addOperation(ahead)
        q.addOperation(awaited)
        let waiting = Task(priority: .medium) { await awaited.finished() }
        XCTAssertTrue(eventually { awaited.promotedRank.load(ordering: .relaxed) == rank },
                      "\(what): the wait did not raise its operation", file: file, line: line)
        XCTAssertEqual(ahead.promotedRank.load(ordering: .relaxed), 0,
                       "\(what): a wait on a queue of unlimited width walked it", file: file, line: line)
        q.maxConcurrentOperationCount = 1
        after(q)
        XCTAssertEqual(ahead.promotedRank.load(ordering: .relaxed), rank,
                       "\(what): the operation the awaited one now waits behind was left below the wait",
                       file: file, line: line)
        await resumeAndAssertRanAtTheWaitsClass(q, awaited: awaited, waiting: waiting, r, release, what, file: file, line: line)
    }

    /// A serial queue, suspended: `before` prepares `ahead` and the queue, `ahead` is
    /// added, a medium-priority wait raises `awaited` before its add, `awaited` is added,
    /// then `after` runs; `ahead` must run at the wait's class all the same.
    private func assertRaisedAheadOfAWaitedAdd(_ release: @Sendable () -> Void, _ what: String,
                                               before: (OperationQueue, BlockOperation) -> Void = { _, _ in },
                                               after: (OperationQueue, BlockOperation) -> Void = { _, _ in },
                                               file: StaticString = #filePath, line: UInt = #line) async {
        let rank = ClassRank.of(QualityOfService.default)
        let q = OperationQueue()
        q.maxConcurrentOperationCount = 1
        q.isSuspended = true
        let r = Recorder()
        let ahead = BlockOperation { r.record() }
        before(q, ahead)
        q.addOperation(ahead)
        let awaited = BlockOperation {}
        let waiting = Task(priority: .medium) { await awaited.finished() }
        XCTAssertTrue(eventually { awaited.promotedRank.load(ordering: .relaxed) == rank },
                      "\(what): the wait did not raise its operation", file: file, line: line)
        q.addOperation(awaited)
        after(q, ahead)
        XCTAssertEqual(ahead.promotedRank.load(ordering: .relaxed), rank,
                       "\(what): the operation ahead was left below the wait", file: file, line: line)
        await resumeAndAssertRanAtTheWaitsClass(q, awaited: awaited, waiting: waiting, r, release, what, file: file, line: line)
    }
}

extension PromotionTests {
    /// A wait for the whole queue waits for the operations added while it waits too:
    /// they rise to its class on their add, an operation with a lower class of its own
    /// included; and one that was at the queue's class when the wait began, given a
    /// lower class of its own while it waits, rises to it as well.
    func testAWaitForTheWholeQueueRaisesWhatIsAddedWhileItWaits() async throws {
        let release = holdWorkers(of: .background)
        defer { release() }
        let rank = ClassRank.of(QualityOfService.default)
        let q = OperationQueue()
        q.isSuspended = true
        let r1 = Recorder(), r2 = Recorder()
        let lowered = BlockOperation { r2.record() }
        q.addOperation(lowered)
        let waiting = Task(priority: .medium) { await q.allOperationsFinished() }
        XCTAssertTrue(eventually { q.state.locked { $0.drainWaitRank } == rank }, "the wait did not register")
        let added = BlockOperation { r1.record() }
        added.qualityOfService = .background
        q.addOperation(added)
        XCTAssertEqual(added.promotedRank.load(ordering: .relaxed), rank,
                       "an operation added while a wait for the whole queue waits was left below it")
        lowered.qualityOfService = .background
        XCTAssertEqual(lowered.promotedRank.load(ordering: .relaxed), rank,
                       "an operation given a lower class while a wait for the whole queue waits was left below it")
        q.isSuspended = false
        let drained = await Task.detached { eventually(within: 60) { q.operationCount == 0 } }.value
        XCTAssertTrue(drained, "the wait for the whole queue waited behind background work")
        if !drained { release() }
        await waiting.value
        XCTAssertEqual(q.state.locked { $0.drainWaitRank }, 0, "the wait's class outlived the drain")
        assertRan(r1, at: .default, "the operation added while the queue's wait waited")
        assertRan(r2, at: .default, "the operation given a lower class while the queue's wait waited")
    }

    /// The queue's class lowered while a wait for all of it waits: its operations rise
    /// to the wait's class.
    func testAQueueLoweredWhileAWaitForAllOfItWaitsRaisesItsOperations() async throws {
        let release = holdWorkers(of: .background)
        defer { release() }
        let rank = ClassRank.of(QualityOfService.default)
        let q = OperationQueue()
        q.isSuspended = true
        let r = Recorder()
        let op = BlockOperation { r.record() }
        q.addOperation(op)
        let waiting = Task(priority: .medium) { await q.allOperationsFinished() }
        XCTAssertTrue(eventually { q.state.locked { $0.drainWaitRank } == rank }, "the wait did not register")
        q.qualityOfService = .background
        XCTAssertEqual(op.promotedRank.load(ordering: .relaxed), rank,
                       "the queue's class lowered under a wait for all of it left its operation below the wait")
        await resumeAndAssertRanAtTheWaitsClass(q, awaited: op, waiting: waiting, r, release, "a wait for the whole queue",
                                                recorded: "the operation of the lowered queue")
    }
}

extension PromotionTests {
    /// A class set on an operation while another thread adds it to a queue is seen by
    /// one of the two: the queue notes that it holds an operation with a class of its
    /// own (which P2's skip depends on), whichever of the two comes first. (The order
    /// the pair needs, seq_cst on both sides, is checked by Tests/Models/
    /// queue_promotion.pml: the reordering a weaker order allows is too rare on x86 for
    /// a test to see.)
    func testAClassSetWhileTheOperationIsAddedIsNotedByTheQueue() {
        let n = Stress.count(20_000)
        let queues = (0..<n).map { _ in
            let q = OperationQueue()
            q.isSuspended = true
            return q
        }
        let ops = (0..<n).map { _ in BlockOperation {} }
        raceInStep(n, { queues[$0].addOperation(ops[$0]) }, { ops[$0].qualityOfService = .background })
        let missed = queues.filter { !$0.state.locked { $0.ownClassAdded } }.count
        XCTAssertEqual(missed, 0, "\(missed) of \(n) queues missed a class set while their operation was added")
        for q in queues {
            q.cancelAllOperations()
            q.isSuspended = false
        }
        for q in queues { q.waitUntilAllOperationsAreFinished() }
    }
}

extension PromotionTests {
    /// A dependency's class rises with its dependent's add, and so does the operation
    /// ahead of it in a narrow queue, whether the dependency is queued before the
    /// dependent's add or after it. After: the add finds it in no queue and raises its
    /// floor alone, and the dependency's own add then walks what is ahead of it.
    func testADependencyAndWhatIsAheadOfItRiseWhetherItIsQueuedBeforeOrAfterItsDependent() {
        let rank = ClassRank.of(QualityOfService.userInitiated)
        for dependencyFirst in [true, false] {
            let narrow = suspendedQueue(.background, width: 1)
            let wide = suspendedQueue(.userInitiated, width: OperationQueue.defaultMaxConcurrentOperationCount)
            let ahead = BlockOperation {}
            narrow.addOperation(ahead)
            let dependency = BlockOperation {}
            let dependent = BlockOperation {}
            dependent.addDependency(dependency) // in no queue: nothing is promoted yet
            XCTAssertEqual(dependency.promotedRank.load(ordering: .acquiring), 0)
            if dependencyFirst {
                narrow.addOperation(dependency)
                wide.addOperation(dependent)
            } else {
                wide.addOperation(dependent)
                XCTAssertEqual(dependency.promotedRank.load(ordering: .acquiring), rank, "the dependency's floor, before its add")
                narrow.addOperation(dependency)
            }
            let order = dependencyFirst ? "dependency queued first" : "dependent queued first"
            XCTAssertGreaterThanOrEqual(dependency.promotedRank.load(ordering: .acquiring), rank, "\(order): the dependency")
            XCTAssertGreaterThanOrEqual(ahead.promotedRank.load(ordering: .acquiring), rank, "\(order): the operation ahead of it")
            for q in [narrow, wide] {
                q.cancelAllOperations()
                q.isSuspended = false
                q.waitUntilAllOperationsAreFinished()
            }
        }
    }

    /// The walk from an operation whose floor its caller has raised already (a
    /// promotion that found it in no queue, then claimed by an add before it looked
    /// again) goes on to what is ahead of it, as a walk that raised it itself does.
    func testAWalkFromAFloorRaisedByItsCallerGoesOnToWhatIsAhead() {
        let rank = ClassRank.of(QualityOfService.userInitiated)
        let narrow = suspendedQueue(.background, width: 1)
        let ahead = BlockOperation {}
        let op = BlockOperation {}
        narrow.addOperations([ahead, op], waitUntilFinished: false)
        XCTAssertTrue(op.raiseFloor(to: rank))
        var raised = RaisedRuns()
        op.raiseFloors(to: rank, walkQueue: true, into: &raised, selfRaised: true)
        raised.promoteRuns(to: rank)
        XCTAssertEqual(ahead.promotedRank.load(ordering: .acquiring), rank)
        narrow.cancelAllOperations()
        narrow.isSuspended = false
        narrow.waitUntilAllOperationsAreFinished()
    }

    /// The same two adds on two threads at once: whichever comes first, or a claim
    /// between the promotion's two looks at the dependency's queue, the dependency and
    /// the operation ahead of it end at the dependent's class.
    func testADependencyQueuedWhileItsDependentsAddPromotesItRaisesWhatIsAheadOfIt() {
        let n = Stress.count(5_000)
        let narrow = (0..<n).map { _ in suspendedQueue(.background, width: 1) }
        let wide = (0..<n).map { _ in suspendedQueue(.userInitiated, width: OperationQueue.defaultMaxConcurrentOperationCount) }
        let ahead = (0..<n).map { i in
            let op = BlockOperation {}
            narrow[i].addOperation(op)
            return op
        }
        let dependencies = (0..<n).map { _ in BlockOperation {} }
        let dependents = (0..<n).map { i in
            let op = BlockOperation {}
            op.addDependency(dependencies[i]) // in no queue: nothing is promoted yet
            return op
        }
        raceInStep(n, { narrow[$0].addOperation(dependencies[$0]) }, { wide[$0].addOperation(dependents[$0]) })
        let rank = ClassRank.of(QualityOfService.userInitiated)
        let low = (0..<n).filter {
            dependencies[$0].promotedRank.load(ordering: .acquiring) < rank || ahead[$0].promotedRank.load(ordering: .acquiring) < rank
        }
        XCTAssertEqual(low.count, 0, "\(low.count) of \(n) dependencies, or the operations ahead of them, stayed below their dependent's class")
        for q in narrow + wide {
            q.cancelAllOperations()
            q.isSuspended = false
        }
        for q in narrow + wide { q.waitUntilAllOperationsAreFinished() }
    }

    /// Runs `first(i)` and `second(i)` on two threads for each i in 0..<n, the two
    /// passing a turnstile together before each step, so that each pair races.
    func raceInStep(_ n: Int, _ first: @escaping @Sendable (Int) -> Void, _ second: @escaping @Sendable (Int) -> Void,
                    file: StaticString = #filePath, line: UInt = #line) {
        let turnstile = Atomic<Int>(0)
        @Sendable func race(_ step: (Int) -> Void) {
            for i in 0..<n {
                turnstile.add(1, ordering: .sequentiallyConsistent)
                while turnstile.load(ordering: .sequentiallyConsistent) < 2 * (i + 1) { sched_yield() }
                step(i)
            }
        }
        let done = DispatchSemaphore(value: 0)
        Thread { race(first); done.signal() }.start()
        Thread { race(second); done.signal() }.start()
        for _ in 0..<2 {
            XCTAssertEqual(done.wait(timeout: .now() + 300), .success, "the two threads did not finish", file: file, line: line)
        }
    }

    /// A suspended queue of class `qos` and width `width`.
    func suspendedQueue(_ qos: QualityOfService, width: Int) -> OperationQueue {
        let q = OperationQueue()
        q.isSuspended = true
        q.qualityOfService = qos
        q.maxConcurrentOperationCount = width
        return q
    }

    /// Resumes `q`, whose class's background workers the caller holds (`release` lets
    /// them go when the wait is stuck behind them), and checks that `awaited` finishes,
    /// that `waiting` returns, and that the operation that records into `r` (`recorded`:
    /// by default, the one ahead of the awaited one) ran at the wait's class.
    func resumeAndAssertRanAtTheWaitsClass(_ q: OperationQueue, awaited: Operation, waiting: Task<Void, Never>,
                                           _ r: Recorder, _ release: @Sendable () -> Void, _ what: String,
                                           recorded: String = "the operation ahead of the awaited one",
                                           file: StaticString = #filePath, line: UInt = #line) async {
        q.isSuspended = false
        let ran = await Task.detached { eventually(within: 60) { awaited.isFinished } }.value
        XCTAssertTrue(ran, "\(what): the awaited operation waited behind background work", file: file, line: line)
        if !ran { release() }
        await waiting.value
        assertRan(r, at: .default, "\(what): \(recorded)", file: file, line: line)
    }
}
