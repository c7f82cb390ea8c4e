import CSpindle
import CSpindleTesting
import Synchronization
import XCTest

/// The Chase–Lev deque and its overflow path, driven directly.
final class DequeTests: XCTestCase {
    /// Tasks identified by their index in one array; `seen[i]` counts deliveries.
    final class Items: @unchecked Sendable {
        let tasks: UnsafeMutablePointer<spindle_task>
        let seen: UnsafeMutablePointer<Atomic<Int>>
        let count: Int
        /// Written only by the thread that stole item i.
        let stolen: UnsafeMutableBufferPointer<Bool>
        init(_ n: Int) {
            count = n
            stolen = .allocate(capacity: n)
            stolen.initialize(repeating: false)
            tasks = .allocate(capacity: n)
            tasks.initialize(repeating: spindle_task(), count: n)
            seen = .allocate(capacity: n)
            for i in 0..<n { (seen + i).initialize(to: Atomic(0)) }
        }
        deinit {
            tasks.deallocate()
            seen.deinitialize(count: count)
            seen.deallocate()
            stolen.deallocate()
        }
        func index(_ t: UnsafeMutablePointer<spindle_task>) -> Int { tasks.distance(to: t) }
        func mark(_ t: UnsafeMutablePointer<spindle_task>) {
            let i = index(t)
            precondition(i >= 0 && i < count, "deque returned a pointer it was never given")
            seen[i].add(1, ordering: .relaxed)
        }
        func counts() -> (missing: Int, duplicated: Int) {
            var missing = 0, dup = 0
            for i in 0..<count {
                let v = seen[i].load(ordering: .relaxed)
                if v == 0 { missing += 1 } else if v > 1 { dup += 1 }
            }
            return (missing, dup)
        }
    }

    func testOwnerIsLIFOAndThiefIsFIFO() {
        let d = spindle_test_deque_create(16)!
        defer { spindle_test_deque_destroy(d) }
        let items = Items(8)
        for i in 0..<8 { XCTAssertEqual(spindle_test_deque_push(d, items.tasks + i), 0) }
        var out: UnsafeMutablePointer<spindle_task>?
        XCTAssertEqual(spindle_test_deque_steal(d, &out), 1)
        XCTAssertEqual(items.index(out!), 0, "thieves take the oldest")
        XCTAssertEqual(spindle_test_deque_steal(d, &out), 1)
        XCTAssertEqual(items.index(out!), 1)
        XCTAssertEqual(items.index(spindle_test_deque_pop(d)!), 7, "the owner takes the newest")
        XCTAssertEqual(items.index(spindle_test_deque_pop(d)!), 6)
        for expected in [5, 4, 3, 2] { XCTAssertEqual(items.index(spindle_test_deque_pop(d)!), expected) }
        XCTAssertNil(spindle_test_deque_pop(d))
        XCTAssertEqual(spindle_test_deque_steal(d, &out), 0)
    }

    func testWrapAroundAndOverflowMoveTheOlderHalf() {
        let d = spindle_test_deque_create(4)!
        defer { spindle_test_deque_destroy(d) }
        XCTAssertEqual(spindle_test_deque_capacity(d), 4)
        let items = Items(64)
        var overflowed = 0
        // Push and pop around the ring many times (wrap-around), then overfill it.
        for round in 0..<10 {
            for k in 0..<3 { XCTAssertEqual(spindle_test_deque_push(d, items.tasks + (round * 3 + k) % 30), 0) }
            for _ in 0..<3 { XCTAssertNotNil(spindle_test_deque_pop(d)) }
        }
        for i in 30..<35 { overflowed += Int(spindle_test_deque_push(d, items.tasks + i)) }
        XCTAssertEqual(overflowed, 2, "a full ring of 4 gives its older half (2) to the injector")
        var out = [UnsafeMutablePointer<spindle_task>?](repeating: nil, count: 8)
        let n = spindle_test_deque_pop_overflow(d, &out, 8)
        XCTAssertEqual(n, 2)
        XCTAssertEqual(out.prefix(2).map { items.index($0!) }, [30, 31], "overflow keeps FIFO order")
        XCTAssertEqual((0..<3).map { _ in items.index(spindle_test_deque_pop(d)!) }, [34, 33, 32])
        XCTAssertNil(spindle_test_deque_pop(d))
    }

    /// One owner pushing and popping, 1 to 8 thieves, a tiny ring so that wrap-around
    /// and overflow happen constantly: every item must come out exactly once.
    func testConcurrentThievesLoseAndDuplicateNothing() {
        for thieves in [1, 2, 4, 8] {
            for capacity in [4, 64] {
                hammer(thieves: thieves, capacity: UInt32(capacity), items: Stress.count(200_000))
            }
        }
    }

    private func hammer(thieves: Int, capacity: UInt32, items n: Int) {
        let d = spindle_test_deque_create(capacity)!
        defer { spindle_test_deque_destroy(d) }
        let items = Items(n)
        let ownerDone = Atomic<Bool>(false)
        let taken = Atomic<Int>(0)
        let dq = UncheckedBox(d)
        onThreads(thieves + 1) { id in
            let d = dq.value
            if id == 0 {
                // Owner: push everything, popping every third push (LIFO side).
                var rng = SystemRandomNumberGenerator()
                for i in 0..<n {
                    _ = spindle_test_deque_push(d, items.tasks + i)
                    if Int.random(in: 0..<3, using: &rng) == 0, let t = spindle_test_deque_pop(d) {
                        items.mark(t)
                        taken.add(1, ordering: .relaxed)
                    }
                }
                while let t = spindle_test_deque_pop(d) {
                    items.mark(t)
                    taken.add(1, ordering: .relaxed)
                }
                ownerDone.store(true, ordering: .releasing)
            } else {
                var out: UnsafeMutablePointer<spindle_task>?
                var batch = [UnsafeMutablePointer<spindle_task>?](repeating: nil, count: 16)
                var idleRounds = 0
                while true {
                    let r = spindle_test_deque_steal(d, &out)
                    if r == 1 {
                        // The task is ours now: clear its link. Nobody else may write
                        // it any more; the end of the test checks that nobody did.
                        out!.pointee.spindle_private.0 = nil
                        items.mark(out!)
                        items.stolen[items.index(out!)] = true
                        taken.add(1, ordering: .relaxed)
                        continue
                    }
                    let m = Int(spindle_test_deque_pop_overflow(d, &batch, 16))
                    for k in 0..<m { items.mark(batch[k]!) }
                    if m > 0 { taken.add(m, ordering: .relaxed); continue }
                    // The owner drains its own deque before it says it is done, so after
                    // that only the overflow can hold items. Give up after a bounded idle
                    // spell rather than hang: a lost item then shows up as missing below.
                    if ownerDone.load(ordering: .acquiring) && r == 0 {
                        if taken.load(ordering: .relaxed) >= n { break }
                        idleRounds += 1
                        if idleRounds > 10_000 { break }
                        sched_yield()
                    }
                }
            }
        }
        let (missing, dup) = items.counts()
        let scribbled = (0..<n).filter { items.stolen[$0] && items.tasks[$0].spindle_private.0 != nil }.count
        XCTAssertEqual(scribbled, 0, "\(scribbled) stolen tasks were written to after the thief owned them")
        XCTAssertEqual(missing, 0, "\(missing) items lost (thieves \(thieves), capacity \(capacity))")
        XCTAssertEqual(dup, 0, "\(dup) items delivered twice (thieves \(thieves), capacity \(capacity))")
    }
}

struct UncheckedBox<T>: @unchecked Sendable {
    let value: T
    init(_ v: T) { value = v }
}
