import CSpindle
import CSpindleTesting
import Foundation
@testable import Spindle
import Synchronization
import XCTest


/// `join`, `concurrentPerform` and `run`: fork-join on the pool.
final class ForkJoinTests: XCTestCase {
    func testDeepRecursiveForkJoin() throws {
        let pool = try ThreadPool()
        XCTAssertEqual(pool.run { fib(pool, Stress.isTSan ? 18 : 24) }, Stress.isTSan ? 2584 : 46368)
        // From outside the pool too (forks go through the injector).
        XCTAssertEqual(fib(pool, 15), 610)
    }

    /// On a thread whose stack is half used, forks run both halves inline and join waits
    /// stop stealing (worker.c, W4); here the workers count as deep from the start.
    /// Everything must still finish, from inside the pool and from outside it, whose
    /// forks go to the injector (a deque of 4 sends the workers' overflow there too).
    func testJoinWaitsThatMayNotStealStillFinish() throws {
        spindle_test_set_deep_join_waits(true)
        var c = ThreadPool.Configuration(workers: 2)
        c.dequeCapacity = 4
        c.maxSpareWorkers = 0
        let pool = try ThreadPool(configuration: c) // its workers have started: deep
        spindle_test_set_deep_join_waits(false)
        XCTAssertEqual(pool.run { fib(pool, Stress.isTSan ? 16 : 20) }, Stress.isTSan ? 987 : 6765)
        XCTAssertEqual(fib(pool, 12), 144)
        let sum = Atomic<Int>(0)
        pool.concurrentPerform(iterations: 1000) { i in sum.add(i, ordering: .relaxed) }
        XCTAssertEqual(sum.load(ordering: .relaxed), 1000 * 999 / 2)
        pool.run { pool.concurrentPerform(iterations: 1000) { i in sum.add(i, ordering: .relaxed) } }
        XCTAssertEqual(sum.load(ordering: .relaxed), 1000 * 999)
        try pool.shutdown()
    }

    /// Fork-join run by spares, while the pool's own workers block: a spare's forks go to
    /// the injector, and a spare waiting for one takes the oldest task there, an
    /// unrelated one, at every level. Past the floor (here 64 KiB instead of half the
    /// stack) forks must run both halves inline, so that nothing taken there waits
    /// again (W4); without that, these waits nest until the stack overflows. A wait
    /// may begin a little past the floor (the frames between a fork just above it and
    /// its wait), never far past it.
    func testJoinWaitsOnSparesStopNestingPastTheFloor() throws {
        let floor = 64 << 10
        spindle_test_set_join_wait_floor(floor)
        defer { spindle_test_set_join_wait_floor(0) }
        var c = ThreadPool.Configuration(workers: 2)
        c.maxSpareWorkers = 4
        let pool = try ThreadPool(configuration: c)
        let started = DispatchSemaphore(value: 0), release = DispatchSemaphore(value: 0)
        for _ in 0..<2 {
            try pool.submit {
                ThreadPool.blocking {
                    started.signal()
                    release.wait()
                }
            }
        }
        started.wait()
        started.wait()

        let sparesSeen = Atomic<Int>(0)
        let input = (0..<Stress.count(100_000)).map { ($0 &* 7919) % 10_007 }
        let sorted = pool.run {
            mergeSort(input[...], on: pool) { sparesSeen.max(pool.spareWorkerCount, ordering: .relaxed) }
        }
        XCTAssertEqual(sorted, input.sorted())
        XCTAssertGreaterThan(sparesSeen.load(ordering: .relaxed), 0, "the sort was to run on spares")
        release.signal()
        release.signal()
        try pool.shutdown()
        let deepest = spindle_test_deepest_join_wait()
        XCTAssertGreaterThan(deepest, 0, "no join wait was recorded")
        XCTAssertLessThan(deepest, floor + (256 << 10), "join waits nested past the floor")
    }

    /// A join's waiter parked on its latch can be woken by something else — here a
    /// submission — after the thief has set the latch but before the thief wakes it.
    /// It then leaves the wait, and may park again in its main loop before the thief's
    /// wake arrives; that wake must not count it out of a join wait it is no longer in
    /// (join.c, L2). Otherwise the pool's count of workers parked in join waits wraps,
    /// and the pool never looks idle again: its shutdown hangs.
    func testAJoinsLateWakeFindsItsWaiterParkedElsewhere() throws {
        spindle_test_set_latch_wake_delay_ns(2_000_000)
        defer { spindle_test_set_latch_wake_delay_ns(0) }
        var c = ThreadPool.Configuration(workers: 2)
        c.maxSpareWorkers = 0
        let pool = try ThreadPool(configuration: c)
        let rounds = DispatchSemaphore(value: 0)
        Thread {
            for _ in 0..<Stress.count(20) {
                let bStarted = Atomic<Bool>(false)
                let bEnding = DispatchSemaphore(value: 0)
                Thread {
                    bEnding.wait()
                    usleep(500) // into the thief's pause between setting the latch and waking
                    try? pool.submit {}
                }.start()
                pool.run {
                    // The first half waits until the second is running on the other
                    // worker, so that this worker's join has to wait for it, and parks.
                    _ = pool.join({ while !bStarted.load(ordering: .acquiring) {} }, {
                        bStarted.store(true, ordering: .releasing)
                        usleep(1_000)
                        bEnding.signal()
                    })
                }
                // Nothing new until the thief's wake has arrived: the waiter parks in its
                // main loop meanwhile.
                usleep(5_000)
            }
            rounds.signal()
        }.start()
        // A pool whose counts went wrong can stop waking its workers, or never finish
        // shutting down: it is left behind rather than waited for.
        guard rounds.wait(timeout: .now() + 30) == .success else {
            return XCTFail("the joins stopped making progress")
        }
        guard eventually(within: 5, { spindle_test_pool_task_sleepers(pool.raw) == 0 }) else {
            return XCTFail("workers counted parked in join waits: \(spindle_test_pool_task_sleepers(pool.raw))")
        }
        try pool.shutdown()
    }

    /// A thread outside the pool waiting for work it handed to the pool (`run`, a join)
    /// spins briefly before it sleeps, but not while every worker of the pool is awake
    /// (join.c, L3): the pool then has its CPUs busy, and the spin would take time from
    /// one of them, often from the very worker running the awaited work.
    func testAnOutsideWaitDoesNotSpinWhileEveryWorkerIsAwake() {
        let status = spindle_test_outside_join_sleeps_when_pool_awake()
        XCTAssertEqual(status, 0, [50: "the pool was not created", 51: "the tasks were not submitted",
                                   52: "the two workers did not each run a task", 53: "no helper thread",
                                   54: "the wait spun on with every worker awake", 55: "the pool did not shut down"][status]
                           ?? "status \(status)")
    }

    func testJoinWaitsForTheOtherHalfWhenTheFirstThrows() throws {
        struct Boom: Error {}
        let pool = try ThreadPool(workers: 2)
        let finished = Atomic<Bool>(false)
        XCTAssertThrowsError(try pool.run {
            Result { try pool.join({ () throws -> Int in throw Boom() }, { () -> Int in
                usleep(20_000)
                finished.store(true, ordering: .releasing)
                return 1
            }) }
        }.get())
        XCTAssertTrue(finished.load(ordering: .acquiring), "join returned before its second half finished")
    }

    /// Join's halves reach the engine as borrowed closure words (no retain of their
    /// contexts): results that own memory must come back intact whether a half ran
    /// inline or on a thief, and what the closures captured must be released exactly
    /// once, after the join.
    func testJoinReturnsOwnedResultsAndReleasesCaptures() throws {
        let pool = try ThreadPool(workers: 2)
        let input = (0..<Stress.count(50_000)).map { ($0 &* 7919) % 10_007 }
        for _ in 0..<4 {
            XCTAssertEqual(pool.run { mergeSort(input[...], on: pool) }, input.sorted())
        }

        let counter = ReleaseCounter()
        let rounds = Stress.count(2_000)
        pool.run {
            for _ in 0..<rounds {
                let left = Token(counter), right = Token(counter)
                let (a, b) = pool.join({ [left] in String(describing: ObjectIdentifier(left)) },
                                       { [right] in [ObjectIdentifier(right)] })
                XCTAssertFalse(a.isEmpty)
                XCTAssertEqual(b.count, 1)
            }
        }
        XCTAssertEqual(counter.released.load(ordering: .relaxed), 2 * rounds)
    }

    /// The offered half taken by another worker: the thief calls the closure through
    /// the words the fork stored (`spindle_swift_fork`), while the joining thread is
    /// still in its own half. Here that half waits until the offered one has run, so
    /// every round takes the stolen path; the other worker is idle, and a fork wakes
    /// an idle worker (park.c), so the wait ends. The offered half's result and the
    /// release of what it captured must come through.
    func testAStolenOfferedHalfRunsOnTheThiefWithItsResultAndCaptures() throws {
        let pool = try ThreadPool(workers: 2)
        let counter = ReleaseCounter()
        let rounds = Stress.count(300)
        let onThief = pool.run { () -> Int in
            var stolen = 0
            for i in 0..<rounds {
                let offeredRan = Atomic<Bool>(false)
                let joiner = pthread_self()
                let token = Token(counter)
                let (a, b) = pool.join({ () -> Int in
                    // Acquiring: pairs with the thief's releasing store.
                    while !offeredRan.load(ordering: .acquiring) { sched_yield() }
                    return i
                }, { [token] () -> (String, Bool) in
                    let elsewhere = pthread_equal(pthread_self(), joiner) == 0
                    offeredRan.store(true, ordering: .releasing)
                    return ("offered \(i) \(ObjectIdentifier(token))", elsewhere)
                })
                XCTAssertEqual(a, i)
                XCTAssertTrue(b.0.hasPrefix("offered \(i) "))
                if b.1 { stolen += 1 }
            }
            return stolen
        }
        XCTAssertEqual(onThief, rounds, "every offered half should have run on the other worker")
        XCTAssertEqual(counter.released.load(ordering: .relaxed), rounds)
        try pool.shutdown()
    }

    func testJoinThrowsTheFirstHalfsTypedError() throws {
        enum Parse: Error, Equatable { case bad(Int) }
        let pool = try ThreadPool(workers: 2)
        // Typed throws: the error keeps its static type through join.
        let result: Result<(Int, Int), Parse> = pool.run {
            Result { () throws(Parse) -> (Int, Int) in
                try pool.join({ () throws(Parse) -> Int in throw .bad(7) }, { 1 })
            }
        }
        XCTAssertEqual(result.map { $0.0 }, .failure(.bad(7)))
        // A non-throwing first half needs no `try`.
        let (x, y) = pool.join({ 2 }, { 3 })
        XCTAssertEqual(x + y, 5)
    }

    func testConcurrentPerformCoversEveryIndexOnce() throws {
        let pool = try ThreadPool()
        for n in [0, 1, 7, 1000, Stress.count(300_000)] {
            let counts = RunCounts(max(n, 1))
            pool.concurrentPerform(iterations: n) { counts.hit($0) }
            if n > 0 { XCTAssertEqual(counts.wrong.count, 0, "n = \(n)") }
        }
        // From inside a worker, nested in fork-join.
        let counts = RunCounts(10_000)
        pool.run { pool.concurrentPerform(iterations: 10_000, grain: 7) { counts.hit($0) } }
        XCTAssertEqual(counts.wrong.count, 0)
    }
}

/// A merge sort that forks its halves with `join` down to runs of 4, which it sorts
/// serially after calling `atLeaf`: results that own memory, and recursion deep enough
/// to fork tens of thousands of times.
private func mergeSort(_ xs: ArraySlice<Int>, on pool: ThreadPool,
                       atLeaf: @escaping @Sendable () -> Void = {}) -> [Int] {
    if xs.count <= 4 {
        atLeaf()
        return xs.sorted()
    }
    let mid = xs.startIndex + xs.count / 2
    let (l, r) = pool.join({ mergeSort(xs[..<mid], on: pool, atLeaf: atLeaf) },
                           { mergeSort(xs[mid...], on: pool, atLeaf: atLeaf) })
    var out: [Int] = []
    out.reserveCapacity(xs.count)
    var i = 0, j = 0
    while i < l.count && j < r.count {
        if l[i] <= r[j] { out.append(l[i]); i += 1 } else { out.append(r[j]); j += 1 }
    }
    out += l[i...]
    out += r[j...]
    return out
}
