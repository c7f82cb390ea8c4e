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
/// default width that every submitter shares.
func contendedCases(pool: ThreadPool, nio: NIOPeer, tasks: Int, reps: Int) throws -> [CaseResult] {
    var out: [CaseResult] = []
    for submitters in [1, 4, 16] {
        let per = max(1, tasks / submitters)
        let name = "contended-\(submitters)"
        out.append(try measure(name, tasks: per * submitters, reps: reps, reference: "dispatch",
                               alsoVs: [("spindle", "nio"), ("spindle-queue", "spindle")], [
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
            + "spindle-queue: OperationQueue.addOperation on one shared queue of the default width"
    }
    return out
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
