#if DEBUG
import Synchronization

/// Points in the operation layer where a test can stop a thread, to put another thread's
/// steps in a window that is otherwise a few instructions wide. Debug builds only: a
/// release build has none of this, and its operation path reads no test state.
///
/// A test installs a hook (`install`) and takes it out when done (`remove`); the hook
/// runs on the thread that reaches a point, with the address of the operation concerned
/// (never a reference: at some points an operation must not be retained), and may
/// block it.
enum OperationSeams {
    enum Point: Sendable {
        /// A finishing dependency, holding its own lock, is about to take a dependent's
        /// lock to count it down (`takeHandOff`).
        case countingDown
        /// A finishing dependency has found a dependent ready, alive and queued, and is
        /// about to retain it, holding the dependent's lock (`countDownOneEdge`).
        case retainingReadyDependent
        /// An operation's finish is about to take its own lock for F2 (`finishProtocol`).
        case finishLock
        /// An operation found ready, in a queue and not finishing, is about to tell its
        /// queue (`evaluateReadiness`, `signalReady`).
        case signallingReady
        /// An add has claimed an operation the program made and is about to take the
        /// queue's lock to register it (`enqueue`, between A2 and A3).
        case registering
        /// An add has linked an operation behind a pending barrier, counted that edge and
        /// released the queue's lock, and is about to register the edge with the barrier
        /// (`completeBarrierEdge`, Readiness.swift R9).
        case behindBarrier
        /// A barrier's add has linked it, counted its edges to the operations ahead of it
        /// and released the queue's lock, and is about to register those edges
        /// (`completeEdges`, Readiness.swift R10).
        case barrierEdges
    }

    private static let hook = Mutex<(@Sendable (Point, UInt) -> Void)?>(nil)
    private static let armed = Atomic<Bool>(false)

    static func install(_ body: @escaping @Sendable (Point, UInt) -> Void) {
        hook.locked { $0 = body }
        // Release: a thread that sees `armed` finds the hook set.
        armed.store(true, ordering: .releasing)
    }

    static func remove() {
        armed.store(false, ordering: .releasing)
        hook.locked { $0 = nil }
    }

    static func reach(_ point: Point, _ operation: UInt) {
        // Acquire pairs with the release store in `install`.
        guard armed.load(ordering: .acquiring) else { return }
        if let hook = hook.locked({ $0 }) { hook(point, operation) }
    }
}
#endif
