import BenchSupport
import Dispatch
import Foundation
import Spindle
import Synchronization

// MARK: contended

/// `submitters` plain threads, released together, each handing its share of `tasks`
/// empty closures to one system — as a server's event loops hand work off, all at once —
/// and timed from their release to the last closure's run. One case per number of
/// submitters (1, 4, 16), so that a system whose hand-off serialises its submitters
/// (one lock, one shared counter) shows it as the count grows. Spindle is measured
/// twice: `ThreadPool.submit`, and `OperationQueue.addOperation` on one queue of the
/// default width that every submitter shares. Beside them, `submit-object-local`: `submit`
/// with one object of a `BlockOperation`'s size per closure, made by the submitter and
/// freed by it once the closure has marked it done, 64 or more behind, as the queue
/// frees its operations (`pool-submit-object-local` in `operation-throughput`): the least
/// an object per operation costs at each number of submitters. What a submitter still
/// keeps when it stops adding is freed after the timing, where the queue's drain frees
/// its rest within it, so it is a lower bound.
func contendedCases(pool: ThreadPool, nio: NIOPeer, tasks: Int, reps: Int) throws -> [CaseResult] {
    var out: [CaseResult] = []
    for submitters in [1, 4, 16] {
        let per = max(1, tasks / submitters)
        let name = "contended-\(submitters)"
        out.append(try measure(name, tasks: per * submitters, reps: reps, reference: "dispatch",
                               alsoVs: [("spindle", "nio"), ("spindle-queue", "spindle"),
                                        ("spindle-queue", "submit-object-local")], [
            SystemRun(name: "spindle") {
                try contendedRun(name, "spindle", submitters: submitters, each: per) { work in
                    { for _ in 0..<per { try pool.submit(work) } }
                }
            },
            SystemRun(name: "spindle-queue") {
                let queue = Spindle.OperationQueue()
                return try contendedRun(name, "spindle-queue", submitters: submitters, each: per) { work in
                    { for _ in 0..<per { queue.addOperation(work) } }
                }
            },
            SystemRun(name: "submit-object-local") {
                let handedOff = HandedOff()
                let t = try contendedRun(name, "submit-object-local", submitters: submitters, each: per) { work in
                    // A global, so that each block captures its object and nothing else.
                    contendedFloorWork = work
                    return {
                        var kept = ObjectsFreedWhereMade(capacity: per)
                        do {
                            for i in 0..<per {
                                // Not Sendable (ManagedBuffer never is); the block only
                                // marks it, and its maker reads the mark before freeing it.
                                nonisolated(unsafe) let object = kept.make(i)
                                try pool.submit {
                                    object.markDone()
                                    contendedFloorWork()
                                }
                                kept.freeMarked()
                            }
                        } catch {
                            handedOff.add(kept.handOff())
                            throw error
                        }
                        handedOff.add(kept.handOff())
                    }
                }
                // Every block has run; the submitters' objects are freed here, outside
                // the timing, once each has handed its own over.
                handedOff.waitFor(submitters)
                return t
            },
            SystemRun(name: "dispatch") {
                try contendedRun(name, "dispatch", submitters: submitters, each: per) { work in
                    { for _ in 0..<per { DispatchQueue.global().async(execute: work) } }
                }
            },
            SystemRun(name: "nio") {
                try contendedRun(name, "nio", submitters: submitters, each: per) { work in
                    { for _ in 0..<per { nio.pool.submit { _ in work() } } }
                }
            },
        ]))
        out[out.count - 1].note = "\(submitters) submitting thread\(submitters == 1 ? "" : "s"), \(per) closures each; "
            + "spindle-queue: OperationQueue.addOperation on one shared queue of the default width; "
            + "submit-object-local: submit with one object of an operation's size per closure, freed by its submitter "
            + "once marked done, as the queue frees its operations: the least an object per operation costs"
    }
    return out
}

/// `submit-object-local`'s closure to run after marking the object: set before its
/// submitters start, read by the blocks they submit.
nonisolated(unsafe) private var contendedFloorWork: @Sendable () -> Void = {}

/// `submit-object-local`'s objects that each submitter still kept when it stopped
/// adding: freed with this, after the timing.
private final class HandedOff: @unchecked Sendable {
    // @unchecked: `kept` is only touched under `lock` (an NSLock, whose hand-over
    // ThreadSanitizer sees: scripts/check-swift.py).
    private let lock = NSLock()
    private var kept: [KeptObjects] = []

    func add(_ rest: KeptObjects) {
        lock.lock()
        kept.append(rest)
        lock.unlock()
    }

    /// Returns once `count` submitters have handed theirs over.
    func waitFor(_ count: Int) {
        while true {
            lock.lock()
            let handed = kept.count
            lock.unlock()
            if handed >= count { return }
            sched_yield()
        }
    }
}

/// Starts `submitters` threads, each with the loop `makeLoop` builds around the
/// closure to hand off, releases them together and returns the ns from their release
/// to the last closure's run. Checks that every closure ran once.
private func contendedRun(_ name: String, _ system: String, submitters: Int, each: Int,
                          _ makeLoop: (@escaping @Sendable () -> Void) -> @Sendable () throws -> Void) throws -> Double {
    let c = Countdown(submitters * each)
    let work: @Sendable () -> Void = { c.hit() }
    let loop = makeLoop(work)
    let ready = DispatchSemaphore(value: 0), go = DispatchSemaphore(value: 0)
    let failed = Atomic<Bool>(false)
    for _ in 0..<submitters {
        Thread.detachNewThread {
            ready.signal()
            go.wait()
            do { try loop() } catch { failed.store(true, ordering: .relaxed) }
        }
    }
    for _ in 0..<submitters { ready.wait() }
    let t = timed {
        for _ in 0..<submitters { go.signal() }
        c.wait()
    }.ns
    guard !failed.load(ordering: .relaxed), c.remaining.load(ordering: .acquiring) == 0 else {
        throw BenchFailure("\(name): \(system) lost closures")
    }
    return t
}
