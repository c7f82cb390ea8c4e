import CSpindle
import CSpindleTesting
import Foundation
import Synchronization
import XCTest

@testable import Spindle

/// The engine's task-node cache (nodes.c): nodes come back to the thread that allocated
/// them, from whichever thread frees them, and nothing is lost when threads exit.
final class TaskNodeCacheTests: XCTestCase {
    /// Node addresses as integers, so that they can cross threads in a `Sendable` box.
    final class Nodes: @unchecked Sendable {
        var addresses: [UInt] = []
    }

    /// Locked with NSLock, a pthread mutex, which ThreadSanitizer sees (it does not
    /// model Synchronization.Mutex's futex).
    final class Mailbox: @unchecked Sendable {
        private let lock = NSLock()
        private var nodes: [UInt] = []
        func put(_ a: UInt) { lock.withLock { nodes.append(a) } }
        func takeAll() -> [UInt] {
            lock.withLock {
                defer { nodes.removeAll(keepingCapacity: true) }
                return nodes
            }
        }
    }

    func testEveryNodeTypeFitsTheCachedSize() {
        XCTAssertLessThanOrEqual(ClosureTask.byteCount, Int(SPINDLE_TASK_CACHED_BYTES))
        XCTAssertLessThanOrEqual(JobTask.byteCount, Int(SPINDLE_TASK_CACHED_BYTES))
    }

    func testANodeFreedOnItsOwnThreadIsReusedThere() {
        let p = spindle_task_alloc(40)!
        XCTAssertEqual(UInt(bitPattern: p) % 16, 0, "a node is aligned as malloc aligns")
        spindle_task_free(p)
        let q = spindle_task_alloc(40)!
        XCTAssertEqual(p, q, "the last node freed here is the next one handed out here")
        spindle_task_free(q)
    }

    /// What the owner saw, recorded on its thread and checked on the test's.
    final class Seen: @unchecked Sendable {
        var localAfterTake: UInt32 = 0
        var handedOut: [UInt] = []
        var freedByOtherThread: UInt64 = 0
        var newHeap = false
    }

    func testNodesFreedOnAnotherThreadComeBackToTheirOwner() {
        // The owner is a thread of its own, with a new heap: the test thread's heap may
        // still be getting nodes back from pools of other tests, and a heap adopted from
        // a thread that exited holds whatever was cached and freed back to it (N3).
        let n = 500
        let nodes = Nodes(), seen = Seen()
        onThreadThatExits {
            seen.newHeap = spindle_test_task_new_heap()
            guard seen.newHeap else { return }
            nodes.addresses = alloc(n)
            onThreadThatExits {
                for a in nodes.addresses { spindle_task_free(UnsafeMutableRawPointer(bitPattern: a)) }
                // Pushes the last partial batch (exiting would too).
                spindle_task_cache_flush()
            }
            // The first allocation takes everything the other thread gave back.
            let first = UInt(bitPattern: spindle_task_alloc(40))
            seen.localAfterTake = localCount()
            seen.handedOut = [first] + alloc(n - 1)
            free(seen.handedOut)
        }
        XCTAssertTrue(seen.newHeap, "the owner did not get a new heap")
        XCTAssertEqual(seen.localAfterTake, UInt32(n - 1), "every node freed on the other thread came back to its owner")
        XCTAssertEqual(Set(seen.handedOut), Set(nodes.addresses), "the same nodes are handed out again, and no others")
    }

    func testTheLocalCacheIsBounded() {
        let before = counters()
        let n = 50_000
        let nodes = alloc(n)
        free(nodes)
        let cached = localCount()
        XCTAssertGreaterThan(cached, 0)
        XCTAssertLessThan(cached, UInt32(n), "the local list keeps a bounded number of nodes")
        let after = counters()
        XCTAssertGreaterThanOrEqual(after.freed - before.freed, UInt64(n) - UInt64(cached),
                                    "nodes past the bound go back to malloc")
    }

    func testWhatComesBackFromAnotherThreadIsBoundedToo() {
        let n = 50_000
        let nodes = Nodes(), seen = Seen()
        onThreadThatExits {
            // A new heap, as above: nothing cached before the test's nodes.
            seen.newHeap = spindle_test_task_new_heap()
            guard seen.newHeap else { return }
            nodes.addresses = alloc(n)
            let before = counters()
            onThreadThatExits {
                for a in nodes.addresses { spindle_task_free(UnsafeMutableRawPointer(bitPattern: a)) }
            }
            seen.freedByOtherThread = counters().freed - before.freed
            let first = spindle_task_alloc(40)!
            seen.localAfterTake = localCount()
            spindle_task_free(first)
        }
        XCTAssertTrue(seen.newHeap, "the owner did not get a new heap")
        let kept = UInt64(seen.localAfterTake) + 1
        XCTAssertGreaterThan(seen.freedByOtherThread, 0, "past the bound, the freeing thread gives nodes to malloc")
        XCTAssertLessThan(kept, UInt64(n), "the owner takes back a bounded number of nodes")
        XCTAssertGreaterThanOrEqual(seen.freedByOtherThread + kept, UInt64(n), "every node was either kept or given to malloc")
    }

    /// Nodes freed after the thread that allocated them exited stay with its heap, for the
    /// next thread that adopts it (N3): threads that come and go, each allocating nodes
    /// that another thread frees after it has gone, do not carve or malloc new ones
    /// every time.
    func testNodesOfAnExitedThreadAreKeptForTheThreadsThatComeAfterIt() {
        let n = 300, generations = 40
        let before = counters()
        for _ in 0..<generations {
            let nodes = Nodes()
            onThreadThatExits { [nodes] in nodes.addresses = alloc(n) }
            free(nodes.addresses)
            spindle_task_cache_flush()
        }
        let grew = counters().malloced - before.malloced
        XCTAssertLessThan(grew, UInt64(n * generations / 4),
                          "\(generations) threads of \(n) nodes each took \(grew) new blocks: an exited thread's nodes were not kept")
    }

    /// Cached nodes are carved from slabs, not malloc'ed one by one between the program's
    /// own allocations, where each would keep the memory around it from merging once the
    /// program freed its objects: nodes allocated between objects still lie side by side.
    func testCachedNodesLieSideBySideNotAmongTheProgramsObjects() {
        let nodes = Nodes()
        onThreadThatExits { [nodes] in
            var objects: [UnsafeMutableRawPointer] = []
            for _ in 0..<2000 {
                nodes.addresses.append(UInt(bitPattern: spindle_task_alloc(40)))
                objects.append(malloc(200)!)
            }
            for o in objects { Foundation.free(o) }
        }
        let sorted = nodes.addresses.sorted()
        let adjacent = zip(sorted, sorted.dropFirst()).filter { $1 - $0 == 64 }.count
        XCTAssertGreaterThan(adjacent, sorted.count / 2,
                             "only \(adjacent) of \(sorted.count) nodes lie next to another: they sit among the program's allocations")
        free(nodes.addresses)
        spindle_task_cache_flush()
    }

    /// A heap's slabs grow with what it has carved (N7): a thread that allocates one node
    /// takes a slab of a few kilobytes, and one that allocates thousands holds at most
    /// twice the blocks it has carved.
    func testAHeapsSlabsGrowWithWhatItHasCarved() {
        let block = UInt64(MemoryLayout<UInt>.size * 2) + UInt64(SPINDLE_TASK_CACHED_BYTES)
        final class Heap: @unchecked Sendable {
            var fresh = false
            var afterOne: (carved: UInt32, bytes: UInt64) = (0, 0)
            var afterMany: (carved: UInt32, bytes: UInt64) = (0, 0)
        }
        let heap = Heap()
        onThreadThatExits { [heap] in
            // A heap of its own: an adopted one may have carved already.
            heap.fresh = spindle_test_task_new_heap()
            let one = alloc(1)
            heap.afterOne = heapFigures()
            let many = alloc(5000)
            heap.afterMany = heapFigures()
            free(one + many)
        }
        XCTAssertTrue(heap.fresh, "the thread did not get a new heap")
        XCTAssertEqual(heap.afterOne.carved, 1)
        XCTAssertLessThanOrEqual(heap.afterOne.bytes, 4096,
                                 "one node took \(heap.afterOne.bytes) bytes of slab")
        XCTAssertEqual(heap.afterMany.carved, 5001)
        XCTAssertGreaterThanOrEqual(heap.afterMany.bytes, 5001 * block)
        XCTAssertLessThanOrEqual(heap.afterMany.bytes, 2 * 5001 * block,
                                 "5 001 nodes took \(heap.afterMany.bytes) bytes of slab")
    }

    func testLargerNodesArePlainBlocks() {
        let nodes = Nodes()
        nodes.addresses = alloc(10, bytes: 4096)
        for a in nodes.addresses {
            XCTAssertEqual(a % 16, 0)
            memset(UnsafeMutableRawPointer(bitPattern: a)!, 0xAB, 4096)
        }
        onThreadThatExits { [nodes] in
            for a in nodes.addresses { spindle_task_free(UnsafeMutableRawPointer(bitPattern: a)) }
        }
    }

    /// Threads allocate nodes, tag them, and hand them to one another at random; whoever
    /// receives a node checks its tag and frees it. Under ThreadSanitizer this checks that
    /// a node's reuse is ordered after its free on another thread (N2).
    func testNodesPassedAroundManyThreadsKeepTheirContents() {
        let threads = 4, perThread = Stress.count(20_000)
        let mailboxes = (0..<threads).map { _ in Mailbox() }
        let received = Atomic<Int>(0), corrupt = Atomic<Int>(0)
        let total = threads * perThread
        // Threads of their own: concurrentPerform may run the iterations one after
        // another, and each thread here waits for nodes the others send it.
        let done = DispatchSemaphore(value: 0)
        for me in 0..<threads { Thread {
            var rng = SystemRandomNumberGenerator()
            var sent = 0
            while received.load(ordering: .relaxed) < total {
                if sent < perThread {
                    let p = spindle_task_alloc(40)!.assumingMemoryBound(to: UInt.self)
                    let tag = UInt(me << 32 | sent)
                    for i in 0..<5 { p[i] = tag &+ UInt(i) }
                    let to = Int.random(in: 0..<threads, using: &rng)
                    mailboxes[to].put(UInt(bitPattern: p))
                    sent += 1
                }
                let mine = mailboxes[me].takeAll()
                for a in mine {
                    let p = UnsafeMutablePointer<UInt>(bitPattern: a)!
                    if (1..<5).contains(where: { p[$0] != p[0] &+ UInt($0) }) { corrupt.add(1, ordering: .relaxed) }
                    spindle_task_free(p)
                }
                if !mine.isEmpty { received.add(mine.count, ordering: .relaxed) }
            }
            spindle_task_cache_flush()
            done.signal()
        }.start() }
        for _ in 0..<threads { done.wait() }
        XCTAssertEqual(received.load(ordering: .relaxed), total)
        XCTAssertEqual(corrupt.load(ordering: .relaxed), 0, "a node was handed out again while another thread still held it")
    }
}

// MARK: helpers

fileprivate func localCount() -> UInt32 {
    var n: UInt32 = 0
    spindle_test_task_cache(&n, nil, nil)
    return n
}

fileprivate func counters() -> (malloced: UInt64, freed: UInt64) {
    var m: UInt64 = 0, f: UInt64 = 0
    spindle_test_task_cache(nil, &m, &f)
    return (m, f)
}

fileprivate func heapFigures() -> (carved: UInt32, bytes: UInt64) {
    var carved: UInt32 = 0, bytes: UInt64 = 0
    spindle_test_task_heap(&carved, &bytes)
    return (carved, bytes)
}

fileprivate func alloc(_ n: Int, bytes: Int = 40) -> [UInt] {
    (0..<n).map { _ in UInt(bitPattern: spindle_task_alloc(bytes)) }
}

fileprivate func free(_ nodes: [UInt]) {
    for a in nodes { spindle_task_free(UnsafeMutableRawPointer(bitPattern: a)) }
}
