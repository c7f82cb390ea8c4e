#if SPINDLE
import Spindle
#else
import Foundation
#endif
import Dispatch

/// Strings recorded from any thread, taken in order.
final class Log: @unchecked Sendable {
    // @unchecked: `items` is only touched under `lock`.
    private let lock = NSLock()
    private var items: [String] = []
    func add(_ s: String) { lock.lock(); items.append(s); lock.unlock() }
    func take() -> String {
        lock.lock()
        defer { items = []; lock.unlock() }
        return items.joined(separator: " ")
    }
}

let log = Log()

/// One observation: a line `name: value` for scripts/foundation-diff.sh to compare.
func show(_ name: String, _ value: Any) { emit("\(name): \(value)") }

/// Writes a line straight to standard output, unbuffered: when a run hangs and is
/// killed, what it observed before is still there to say where.
func emit(_ line: String) {
    let bytes = Array((line + "\n").utf8)
    var written = 0
    while written < bytes.count {
        let n = bytes.withUnsafeBytes { write(1, $0.baseAddress! + written, $0.count - written) }
        if n <= 0 { return }
        written += n
    }
}

/// Runs `body` on a thread of its own and waits up to `seconds` for it: prints TIMEOUT if
/// it has not returned by then. Returns a semaphore signalled when it does return.
@discardableResult
func bounded(_ name: String, _ seconds: Double, _ body: @escaping @Sendable () -> Void) -> DispatchSemaphore {
    let done = DispatchSemaphore(value: 0)
    let returned = DispatchSemaphore(value: 0)
    Thread.detachNewThread { body(); done.signal(); returned.signal() }
    if done.wait(timeout: .now() + seconds) == .timedOut { show(name, "TIMEOUT") }
    return returned
}

/// A linear congruential generator: the same numbers on both sides.
struct Numbers {
    var state: UInt64
    mutating func below(_ n: Int) -> Int {
        state = state &* 6364136223846793005 &+ 1442695040888963407
        return Int((state >> 33) % UInt64(n))
    }
}

/// The seeds of each family of random programs: 300 of them, from the number in
/// `SPINDLE_DIFF_SEED` (0 when unset), so that a run can explore programs beyond the
/// ones every check runs (`scripts/foundation-diff.sh --seed N`).
let programSeeds: Range<Int> = {
    let first = getenv("SPINDLE_DIFF_SEED").flatMap { Int(String(cString: $0)) } ?? 0
    return first..<(first + 300)
}()

/// The priorities and the classes random programs draw from.
let programLevels: [Operation.QueuePriority] = [.veryLow, .low, .normal, .high, .veryHigh]
let programClasses: [QualityOfService] = [.background, .utility, .default, .userInitiated, .userInteractive]

/// Operation `i` of a random program, of the kind `kind` names: 1, asynchronous
/// (`FinishingLater`); 2, with a readiness of its own (`Gated`), whose gate operation
/// `opener` opens; anything else, a `BlockOperation`. Half of them get a random
/// priority. `what` records both.
func randomOperation(_ i: Int, kind: Int, openedBy opener: Int?, _ r: inout Numbers, what: inout String,
                     work: @escaping @Sendable () -> Void) -> Operation {
    let op: Operation
    switch kind {
    case 1:
        op = FinishingLater(work)
        what += " o\(i):async"
    case 2:
        op = Gated(work)
        what += " o\(i):gated-by-o\(opener ?? -1)"
    default:
        op = BlockOperation(block: work)
    }
    if r.below(2) == 0 {
        op.queuePriority = programLevels[r.below(5)]
        what += " o\(i)=\(op.queuePriority.rawValue)"
    }
    return op
}

/// An action of operation `i` of a random program of `n`: a new priority for one of
/// them, recorded in `what`.
func randomPriorityChange(by i: Int, of n: Int, _ r: inout Numbers, what: inout String) -> (Int, Operation.QueuePriority) {
    let j = r.below(n), p = programLevels[r.below(5)]
    what += " [o\(i): o\(j)=\(p.rawValue)]"
    return (j, p)
}

func names(_ ops: [Operation]) -> [String] { ops.map { $0.name ?? "nil" } }

let priorities: [(String, Operation.QueuePriority)] = [("lo", .low), ("hi", .high), ("n", .normal), ("vh", .veryHigh)]

func named(_ name: String, _ priority: Operation.QueuePriority = .normal, _ body: @escaping @Sendable () -> Void = {}) -> BlockOperation {
    let op = BlockOperation(block: body)
    op.name = name
    op.queuePriority = priority
    return op
}

/// Two operations that each say they have started, then wait up to `seconds` for the
/// other to say so, and log "met", or "alone" when the other did not start beside it;
/// `bothReturned` waits until both have logged.
struct MeetingPair {
    let operations: [BlockOperation]
    private let met = DispatchSemaphore(value: 0)

    init(_ seconds: Double) {
        let arrived = [DispatchSemaphore(value: 0), DispatchSemaphore(value: 0)]
        let met = self.met
        operations = (0..<2).map { me in
            BlockOperation {
                arrived[me].signal()
                log.add(arrived[1 - me].wait(timeout: .now() + seconds) == .success ? "met" : "alone")
                met.signal()
            }
        }
    }

    func bothReturned() { met.wait(); met.wait() }
}

/// Adds `ops` to `queue` while it is suspended, cancels `target`, then resumes the queue
/// and waits for it: an operation cancelled before its queue could start it.
func addCancelledWhileSuspended(_ ops: [Operation], cancelling target: Operation,
                                to queue: OperationQueue = OperationQueue()) {
    queue.isSuspended = true
    queue.addOperations(ops, waitUntilFinished: false)
    target.cancel()
    queue.isSuspended = false
    queue.waitUntilAllOperationsAreFinished()
}
