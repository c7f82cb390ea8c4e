import Synchronization

/// An operation that runs one or more closures, concurrently, and finishes when all of
/// them have returned.
///
/// Unlike Foundation on Linux, which runs the blocks one after another, Spindle runs
/// them in parallel on the pool (as Darwin does); the first block runs on the thread
/// that started the operation.
open class BlockOperation: Operation, @unchecked Sendable {
    struct Blocks {
        var first: (@Sendable () -> Void)?
        var more: [@Sendable () -> Void] = []
    }
    let blocks = Mutex(Blocks())

    /// Creates an operation with no blocks yet.
    public override init() {}

    /// Creates an operation that runs `block`.
    public init(block: @escaping @Sendable () -> Void) {
        blocks.locked { $0.first = block }
    }

    /// Adds a block to run concurrently with the others. Traps once the operation has
    /// started (Foundation treats this as a programmer error).
    open func addExecutionBlock(_ block: @escaping @Sendable () -> Void) {
        if isExecuting || isFinished {
            fatalError("BlockOperation.addExecutionBlock was called on \(describe()) after it started")
        }
        blocks.locked { b in
            if b.first == nil { b.first = block } else { b.more.append(block) }
        }
    }

    /// The blocks, in the order they were added.
    open var executionBlocks: [@Sendable () -> Void] {
        blocks.locked { b in (b.first.map { [$0] } ?? []) + b.more }
    }

    /// Runs every block — concurrently on the pool when there are several — and returns when all have returned.
    open override func main() {
        let all = blocks.locked { b -> [@Sendable () -> Void] in
            guard let first = b.first else { return [] }
            return b.more.isEmpty ? [first] : [first] + b.more
        }
        switch all.count {
        case 0: return
        case 1: all[0]()
        default:
            let pool = ThreadPool.current ?? QoSPools.pool(for: qualityOfService)
            pool.concurrentPerform(iterations: all.count, grain: 1) { all[$0]() }
        }
    }
}
