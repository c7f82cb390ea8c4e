import Synchronization

/// An operation that runs one or more closures, concurrently, and finishes when all of
/// them have returned.
///
/// Unlike Foundation on Linux, which runs the blocks one after another, Spindle runs
/// them in parallel on the pool (as Darwin does); the first block runs on the thread
/// that started the operation.
open class BlockOperation: Operation, @unchecked Sendable {
    // @unchecked: `initial` never changes; the other blocks are behind `more`.

    /// The block given to ``init(block:)``. Immutable, so running it takes no lock and
    /// no copy: almost every BlockOperation has exactly this one block.
    private let initial: (@Sendable () -> Void)?
    /// Blocks added with ``addExecutionBlock(_:)``, in order.
    private let more = Mutex<[@Sendable () -> Void]>([])
    /// Set once a block is added, so that ``main()`` skips the lock otherwise.
    /// Adding traps once the operation has started, so `main` sees every block added.
    private let hasMore = Atomic<Bool>(false)

    /// Creates an operation with no blocks yet.
    public override init() {
        initial = nil
    }

    /// Creates an operation that runs `block`.
    public init(block: consuming @escaping @Sendable () -> Void) {
        initial = block
    }

    /// Adds a block to run concurrently with the others. Traps once the operation has
    /// started (Foundation treats this as a programmer error).
    open func addExecutionBlock(_ block: @escaping @Sendable () -> Void) {
        if isExecuting || isFinished {
            fatalError("BlockOperation.addExecutionBlock was called on \(describe()) after it started")
        }
        more.locked { $0.append(block) }
        hasMore.store(true, ordering: .releasing)
    }

    /// The blocks, in the order they were added.
    open var executionBlocks: [@Sendable () -> Void] {
        let added = more.locked { $0 }
        return initial.map { [$0] + added } ?? added
    }

    /// Runs every block — concurrently on the pool when there are several — and returns
    /// when all have returned.
    open override func main() {
        if !hasMore.load(ordering: .acquiring) {
            initial?()
            return
        }
        let all = executionBlocks
        switch all.count {
        case 0: return
        case 1: all[0]()
        default:
            let pool = ThreadPool.current ?? QoSPools.pool(for: qualityOfService)
            pool.concurrentPerform(iterations: all.count, grain: 1) { all[$0]() }
        }
    }
}
