import Synchronization

// Where a BlockOperation's blocks live: in `Operation` itself, so that BlockOperation
// has no stored properties of its own (see BlockOperation.swift for why).

/// A ``BlockOperation``'s first block, in a non-copyable box so that running it borrows
/// the closure where it is stored.
///
/// Calling a closure kept in a class's `var` copies it out first — a retain before the
/// call and a release after, on the worker, of a context the adding thread allocated
/// (and later frees): two atomic operations and a cache line pulled across per
/// operation. A `let` would be borrowed, but the block is set after `init()` (see
/// `Operation.blockBody`). A non-copyable value cannot be copied out, so the stored
/// box is borrowed in place for the call, and a `borrowing` method reaches the closure
/// without a copy.
struct BlockBody: ~Copyable {
    var block: (@Sendable () -> Void)?

    init(_ block: (@Sendable () -> Void)? = nil) { self.block = block }

    /// Runs the block, if there is one, without retaining it.
    @inline(__always)
    borrowing func run() { block?() }
}

extension Operation {
    final class MoreBlocks: Sendable {
        let blocks = Mutex<[@Sendable () -> Void]>([])

        /// The box whose address `moreBlocksWord` holds (non-zero).
        static func unmanaged(_ bits: UInt) -> Unmanaged<MoreBlocks> {
            // safety: a non-zero word holds a box retained by `moreBlocksBox` and released
            // in deinit.
            unsafe Unmanaged.fromOpaque(UnsafeRawPointer(bitPattern: bits).unsafelyUnwrapped)
        }
    }

    /// True once a block has been added with `addExecutionBlock(_:)`. Acquiring: pairs
    /// with the publishing CAS in `moreBlocksBox`.
    final var hasMoreBlocks: Bool { moreBlocksWord.load(ordering: .acquiring) != 0 }

    /// The added blocks' box, if any.
    final var moreBlocks: MoreBlocks? {
        let bits = moreBlocksWord.load(ordering: .acquiring)
        return unsafe bits == 0 ? nil : MoreBlocks.unmanaged(bits).takeUnretainedValue()
    }

    /// The added blocks' box, made (once, whoever wins the race) if there is none.
    final func moreBlocksBox() -> MoreBlocks {
        if let box = moreBlocks { return box }
        // safety: the word's reference if this thread wins the race; released at once if it
        // loses.
        let fresh = unsafe Unmanaged.passRetained(MoreBlocks())
        let bits = unsafe UInt(bitPattern: fresh.toOpaque())
        // acq_rel: release publishes the new box; acquire, on failure, sees the winner's.
        let (won, current) = moreBlocksWord.compareExchange(
            expected: 0, desired: bits, ordering: .acquiringAndReleasing)
        if won { return unsafe fresh.takeUnretainedValue() }
        unsafe fresh.release()
        return unsafe MoreBlocks.unmanaged(current).takeUnretainedValue()
    }
}
