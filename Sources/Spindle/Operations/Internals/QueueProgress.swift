import Foundation
import Synchronization

/// An operation queue's progress (``OperationQueue/progress``): a `Progress` that notes
/// when its total is first set.
///
/// As with Foundation, a queue reports its operations' progress once the program sets
/// the total of its progress, to any value, zero included; reading the progress, or its
/// total, does not start the reporting.
final class QueueProgress: Progress, @unchecked Sendable {
    // @unchecked: `Progress` is a class of Foundation's; the updates Spindle makes to
    // this one are serialised by the queue's `progressLock` (`runReportingProgress`).

    /// Set by the first store to `totalUnitCount`, never cleared. Release: pairs with the
    /// acquiring load in `runReportingProgress`, which then sees the total it follows.
    let reporting = Atomic<Bool>(false)

    init() {
        // `parent: nil`: never an implicit child of a progress current on this thread.
        super.init(parent: nil, userInfo: nil)
    }

    override var totalUnitCount: Int64 {
        get { super.totalUnitCount }
        set {
            super.totalUnitCount = newValue
            reporting.store(true, ordering: .releasing)
        }
    }
}
