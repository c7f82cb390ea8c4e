import Synchronization

/// An operation that runs one or more closures, concurrently, and finishes when all of
/// them have returned.
///
/// Unlike Foundation on Linux, which runs the blocks one after another, Spindle runs
/// them in parallel on the pool (as Darwin does); the first block runs on the thread
/// that started the operation.
open class BlockOperation: Operation, @unchecked Sendable {
    // @unchecked: the first block never changes; the others are behind a lock.
    //
    // No stored properties of its own: the blocks live in `Operation` (`blockBody`,
    // `moreBlocks`). A subclass with stored properties gets an ivar destroyer whose
    // deinit retains and releases the dying object around it — two atomic operations
    // on the thread that frees each operation, for nothing.

    /// Creates an operation with no blocks yet.
    ///
    /// The only designated initialiser, as in Foundation: a subclass whose own
    /// initialiser does not call `super.init()` gets it called implicitly only when its
    /// superclass has exactly one designated initialiser, and a subclass that declares
    /// none inherits ``init(block:)`` only when it inherits every designated one. A
    /// designated `init(block:)` would break the first kind of subclass.
    public override init() {
        super.init()
    }

    /// Creates an operation that runs `block`.
    public convenience init(block: consuming @escaping @Sendable () -> Void) {
        self.init()
        unsafe blockBody = BlockBody(block)
    }

    /// Adds a block to run concurrently with the others. Traps once the operation has
    /// started (Foundation treats this as a programmer error).
    open func addExecutionBlock(_ block: @escaping @Sendable () -> Void) {
        if isExecuting || isFinished {
            fatalError("BlockOperation.addExecutionBlock was called on \(describe()) after it started")
        }
        let box = moreBlocksBox()
        box.blocks.locked { $0.append(block) }
    }

    /// The blocks, in the order they were added.
    open var executionBlocks: [@Sendable () -> Void] {
        let added = moreBlocks?.blocks.locked { $0 } ?? []
        return unsafe blockBody.block.map { [$0] + added } ?? added
    }

    /// Runs every block — concurrently on the pool when there are several — and returns
    /// when all have returned.
    open override func main() {
        if !hasMoreBlocks {
            unsafe blockBody.run()
            return
        }
        runExecutionBlocks()
    }

    /// `main()` with blocks added by ``addExecutionBlock(_:)``: out of line, so that the
    /// usual one-block operation runs its block without saving registers for this.
    @inline(never)
    private func runExecutionBlocks() {
        let all = executionBlocks
        switch all.count {
        case 0: return
        case 1: all[0]()
        default:
            let pool = ThreadPool.current ?? QoSPools.pool(for: qualityOfService)
            // Every block sees the operation's queue as `OperationQueue.current` and the
            // operation as the thread's current one, on whichever worker it runs. (Boxed:
            // unretained references, which this call outlives, only read by the blocks.)
            let context = unsafe UncheckedSendableBox(ThreadState.current.runningContext)
            Self.runConcurrently(0..<all.count, on: pool) { i in
                unsafe ThreadState.current.withRunningContext(context.value) { all[i]() }
            }
        }
    }

    /// Runs `run` for each index of `range`, the first on this thread and every other
    /// as a task of its own, forked (``ThreadPool/join(_:_:)``, halving the range).
    ///
    /// A task per block, not a parallel loop: the blocks run concurrently, as Apple
    /// documents, even where the pool has fewer workers than there are blocks — a
    /// container of one CPU has one. A block that waits (for another block, say) blocks
    /// its worker, a spare starts in its place, and the spare finds the blocks still
    /// waiting to run on the deques. A parallel loop hands the blocks to one helper per
    /// other worker, and to none when the pool has one: there, blocks that wait for
    /// each other would never return.
    private static func runConcurrently(_ range: Range<Int>, on pool: ThreadPool, _ run: @Sendable (Int) -> Void) {
        if range.count == 1 {
            run(range.lowerBound)
            return
        }
        let middle = range.lowerBound + range.count / 2
        _ = pool.join({ runConcurrently(range.lowerBound..<middle, on: pool, run) },
                      { runConcurrently(middle..<range.upperBound, on: pool, run) })
    }
}
