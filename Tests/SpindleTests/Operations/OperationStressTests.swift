import Synchronization
import XCTest

@testable import Spindle

/// A random DAG of operations over several queues, with random priorities, widths,
/// cancellations, priority changes and suspend/resume, checked for the invariants users
/// rely on.
/// Size: 20 000 × SPINDLE_STRESS (≥ 10^5 from SPINDLE_STRESS=5).
final class OperationStressTests: XCTestCase {
    final class Probe: @unchecked Sendable {
        let ran: UnsafeMutablePointer<Atomic<Int>>
        let completed: UnsafeMutablePointer<Atomic<Int>>
        let early: Atomic<Int> = Atomic(0)
        let n: Int
        init(_ n: Int) {
            self.n = n
            ran = .allocate(capacity: n)
            completed = .allocate(capacity: n)
            for i in 0..<n {
                (ran + i).initialize(to: Atomic(0))
                (completed + i).initialize(to: Atomic(0))
            }
        }
        deinit {
            ran.deinitialize(count: n); ran.deallocate()
            completed.deinitialize(count: n); completed.deallocate()
        }
    }

    func testRandomDAGAcrossQueues() throws {
        let n = Stress.count(20_000)
        var rng = SplitMix64(seed: UInt64(ProcessInfo.processInfo.environment["SPINDLE_SEED"].flatMap { UInt64($0) } ?? 0x5EED))
        let queues = (0..<4).map { _ in OperationQueue() }
        let widths = [-1, 1, 2, 4]
        for (q, w) in zip(queues, widths) { q.maxConcurrentOperationCount = w }
        let probe = Probe(n)
        var ops: [Operation] = []
        ops.reserveCapacity(n)
        var cancelledEver = [Bool](repeating: false, count: n)
        let priorities: [Operation.QueuePriority] = [.veryLow, .low, .normal, .high, .veryHigh]

        for i in 0..<n {
            let box = Mutex<[Operation]>([])
            let op = BlockOperation {
                // Every dependency must have finished before main runs.
                for d in box.locked({ $0 }) where !d.isFinished { probe.early.add(1, ordering: .relaxed) }
                probe.ran[i].add(1, ordering: .relaxed)
            }
            op.completionBlock = { probe.completed[i].add(1, ordering: .relaxed) }
            op.queuePriority = priorities[Int(rng.next() % 5)]
            if i > 0 {
                for _ in 0..<Int(rng.next() % 4) {
                    let j = Int(rng.next() % UInt64(i))
                    op.addDependency(ops[j])
                }
            }
            box.locked { $0 = op.dependencies }
            if rng.next() % 50 == 0 { op.cancel(); cancelledEver[i] = true }
            ops.append(op)
            let q = queues[Int(rng.next() % 4)]
            q.addOperation(op)
            switch rng.next() % 400 {
            case 0: queues[Int(rng.next() % 4)].isSuspended = true
            case 1: queues[Int(rng.next() % 4)].isSuspended = false
            case 2: queues[Int(rng.next() % 4)].maxConcurrentOperationCount = [-1, 1, 2, 3][Int(rng.next() % 4)]
            case 3:
                let k = Int(rng.next() % UInt64(i + 1))
                ops[k].cancel()
                cancelledEver[k] = true
            case 4..<24:
                // A new priority for an operation that may be waiting, ready, running or
                // finishing on another thread: it moves in its queue's lines or nowhere.
                ops[Int(rng.next() % UInt64(i + 1))].queuePriority = priorities[Int(rng.next() % 5)]
            default: break
            }
        }
        for q in queues { q.isSuspended = false }

        let finished = DispatchSemaphore(value: 0)
        let all = UncheckedBox(queues)
        Thread.detachNewThread {
            for q in all.value { q.waitUntilAllOperationsAreFinished() }
            finished.signal()
        }
        XCTAssertEqual(finished.wait(timeout: .now() + 120), .success, "waitUntilAllOperationsAreFinished did not return")

        // Completion blocks run as tasks of their own, after their operations retired.
        _ = eventually { (0..<n).allSatisfy { probe.completed[$0].load(ordering: .acquiring) >= 1 } }
        var wrongRuns = 0, wrongCompletions = 0, unfinished = 0
        for i in 0..<n {
            let r = probe.ran[i].load(ordering: .relaxed)
            if cancelledEver[i] ? r > 1 : r != 1 { wrongRuns += 1 }
            if probe.completed[i].load(ordering: .acquiring) != 1 { wrongCompletions += 1 }
            if !ops[i].isFinished { unfinished += 1 }
        }
        XCTAssertEqual(wrongRuns, 0, "operations whose main ran a wrong number of times")
        XCTAssertEqual(wrongCompletions, 0, "completion blocks that did not run exactly once")
        XCTAssertEqual(unfinished, 0)
        XCTAssertEqual(probe.early.load(ordering: .relaxed), 0, "main ran before a dependency finished")
        for q in queues { XCTAssertEqual(q.operationCount, 0) }
    }
}

/// A small deterministic generator, so a failing seed can be replayed (SPINDLE_SEED).
struct SplitMix64: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
