/// The operation behind ``OperationQueue/addBarrierBlock(_:)``: the queue's own, so not
/// listed in `operations`, counted in `operationCount`, or listed in `dependencies`.
final class BarrierOperation: BlockOperation, @unchecked Sendable {
    /// Ready once everything ahead of it has finished, cancelled or not (Readiness.swift,
    /// R11). A barrier that `cancelAllOperations()` cancelled does not run its block, but
    /// it still starts only once the operations ahead of it have finished, and what is
    /// added behind it waits for it: cancelling never lets work added after a barrier run
    /// beside work added before it. (Foundation on Linux gets the same from the dispatch
    /// barrier that runs its barrier operation, cancelled or not.)
    override var isReady: Bool { dependenciesFinished }
}
