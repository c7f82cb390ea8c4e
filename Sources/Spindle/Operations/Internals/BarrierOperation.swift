/// The operation behind ``OperationQueue/addBarrierBlock(_:)``: the queue's own, so not
/// listed in `operations`, counted in `operationCount`, or listed in `dependencies`.
final class BarrierOperation: BlockOperation, @unchecked Sendable {}
