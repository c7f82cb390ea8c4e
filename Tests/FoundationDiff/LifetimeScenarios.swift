#if SPINDLE
import Spindle
#else
import Foundation
#endif
import Dispatch

/// How long a queue keeps an operation alive: from its add until it has finished. What
/// an operation's block captured is freed once the queue lets go of it, unless the
/// program holds the operation itself. A release follows a finish on another thread,
/// so each is waited for with a deadline only a queue that keeps the operation reaches.
func lifetimeScenarios() {
    for width in [OperationQueue.defaultMaxConcurrentOperationCount, 2] {
        // Operations that finish while a long one runs, with nothing added after them.
        let q = OperationQueue()
        q.maxConcurrentOperationCount = width
        let gate = DispatchSemaphore(value: 0)
        q.addOperation { gate.wait() }
        let ran = DispatchGroup()
        var watched: [Watched] = []
        for _ in 0..<(width == 2 ? 20 : 1) {
            let c = Captured()
            watched.append(Watched(c))
            ran.enter()
            q.addOperation { [c] in c.touch(); ran.leave() }
        }
        ran.wait()
        show("lifetime.freed-while-another-runs.width-\(width)", releasedWithin(10, watched))
        gate.signal()
        q.waitUntilAllOperationsAreFinished()
    }
    for width in [OperationQueue.defaultMaxConcurrentOperationCount, 1, 2] {
        for endFirst in [false, true] {
            // Operations that finish before a long one added after them, which runs
            // on: added before it, or once they had finished.
            let q = OperationQueue()
            q.maxConcurrentOperationCount = width
            let gate = DispatchSemaphore(value: 0)
            let ran = DispatchGroup()
            var watched: [Watched] = []
            for _ in 0..<5 {
                let c = Captured()
                watched.append(Watched(c))
                ran.enter()
                q.addOperation { [c] in c.touch(); ran.leave() }
            }
            if endFirst { ran.wait() }
            q.addOperation { gate.wait() }
            ran.wait()
            show("lifetime.freed-while-a-newer-one-runs.width-\(width)\(endFirst ? ".added-after-their-end" : "")",
                 releasedWithin(10, watched))
            gate.signal()
            q.waitUntilAllOperationsAreFinished()
        }
    }
    do {
        // The program's own reference keeps a finished operation, and its block, alive.
        let q = OperationQueue()
        var watched: [Watched] = []
        let op: BlockOperation
        do {
            let c = Captured()
            watched.append(Watched(c))
            op = BlockOperation { [c] in c.touch() }
        }
        q.addOperation(op)
        q.waitUntilAllOperationsAreFinished()
        show("lifetime.kept-by-the-program", releasedWithin(0.2, watched) ? "freed" : "alive")
        withExtendedLifetime(op) {}
    }
}

/// An object a block captures.
private final class Captured: @unchecked Sendable {
    // @unchecked: touched only by the block that captured it.
    private var touches = 0
    func touch() { touches += 1 }
}

/// A weak reference to a captured object.
private final class Watched: @unchecked Sendable {
    // @unchecked: only read after it is set, by the thread that made it.
    weak var value: Captured?
    init(_ value: Captured) { self.value = value }
}

/// Whether every watched object is freed within `seconds`.
private func releasedWithin(_ seconds: Double, _ watched: [Watched]) -> Bool {
    let deadline = DispatchTime.now() + seconds
    while watched.contains(where: { $0.value != nil }) {
        if DispatchTime.now() > deadline { return false }
        usleep(1000)
    }
    return true
}
