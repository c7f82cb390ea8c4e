/// The ready operations of a queue: one line per priority level and one for barriers
/// above them (`QueueFields.level`), each kept in the order its operations were added
/// (`QueueFields.order`), as Foundation's queue starts them: among the ready operations
/// of the highest priority, the one added first, even when it became ready after
/// operations added behind it.
///
/// Each line is a FIFO ring of unretained references that grows by doubling, and a
/// binary heap beside it, by `order`, for late arrivals. An operation goes to the ring
/// when it was added after the ring's last one, which is how almost every operation
/// arrives (it is ready when added, or the only one waiting); one that became ready
/// after operations added behind it (its dependency finished later) goes to the heap,
/// so the ring stays in order. A pop takes the lower `order` of the ring's first and
/// the heap's top. The usual pop, with no late arrival at its level, looks at the ring
/// alone, as a single FIFO would. (Keeping each line in the order operations became
/// ready instead would start a fan-out's dependents in the order the finishing
/// dependency's table lists them, which changes from run to run.)
///
/// A class holding plain pointers, mutated in place under the queue's lock, rather than
/// Swift Arrays in the queue's state struct: an Array pays a copy-on-write check (and,
/// now and then, a copy) on every pop, which a serial queue does once per operation.
/// One object per queue, made with it. (The heaps are Arrays: only late arrivals use
/// them.)
///
/// The slots hold no reference: the queue's list holds every operation in a line, and
/// does not release one while `QueueFields.inRing` is set (QueueRegistry.swift). A
/// retained slot would cost a retain on the adding thread and a release on the worker
/// that starts the operation, both on the object's header line, for each operation a
/// serial queue runs.
@safe
final class ReadyRings {
    // safety: the rings own their buffers; each slot names an operation the queue's
    // list keeps alive while its `inRing` flag is set, which only these methods clear.
    @safe
    struct Ring {
        // safety: `slots` holds `capacity` entries, of which the `count` from `head`
        // (wrapping) are live; only the ring's own methods touch it.
        var slots: UnsafeMutablePointer<Unmanaged<Operation>>? = nil
        var capacity = 0
        var head = 0
        var count = 0
        /// The `order` of the last operation pushed: while the ring is not empty, not
        /// below any it holds (a `remove` can leave it above them, which only sends
        /// more arrivals to the heap). Kept here so that a push compares without
        /// reading that operation.
        var lastOrder: UInt64 = 0

        mutating func push(_ op: Operation, order: UInt64) {
            if count == capacity { grow() }
            unsafe op.queueFields.inRing = true
            // safety: unretained; the list keeps it while `inRing` is set.
            unsafe slots.unsafelyUnwrapped[(head + count) & (capacity - 1)] = unsafe Unmanaged.passUnretained(op)
            count += 1
            lastOrder = order
        }

        /// The `order` of the ring's first operation (the ring is not empty).
        var firstOrder: UInt64 { unsafe slots.unsafelyUnwrapped[head].withGuaranteedReference { unsafe $0.queueFields.order } }

        mutating func pop() -> Unmanaged<Operation> {
            let u = unsafe slots.unsafelyUnwrapped[head]
            head = (head + 1) & (capacity - 1)
            count -= 1
            // The caller holds it under the queue's lock, where the list keeps it.
            unsafe u.withGuaranteedReference { unsafe $0.queueFields.inRing = false }
            return unsafe u
        }

        mutating func grow() {
            let newCapacity = max(8, capacity * 2) // a power of two: indices wrap by masking
            let grown = UnsafeMutablePointer<Unmanaged<Operation>>.allocate(capacity: newCapacity)
            for i in 0..<count { unsafe (grown + i).initialize(to: slots.unsafelyUnwrapped[(head + i) & (capacity - 1)]) }
            unsafe slots?.deallocate()
            unsafe slots = unsafe grown
            capacity = newCapacity
            head = 0
        }

        mutating func remove(_ op: Operation) -> Bool {
            // safety: an address compared, never dereferenced.
            let target = unsafe Unmanaged.passUnretained(op).toOpaque()
            guard let i = (0..<count).first(where: {
                unsafe slots.unsafelyUnwrapped[(head + $0) & (capacity - 1)].toOpaque() == target
            }) else { return false }
            for j in i..<(count - 1) {
                unsafe slots.unsafelyUnwrapped[(head + j) & (capacity - 1)] = unsafe slots.unsafelyUnwrapped[(head + j + 1) & (capacity - 1)]
            }
            count -= 1
            unsafe op.queueFields.inRing = false
            return true
        }

        /// Empties the ring, clearing each operation's `inRing`.
        mutating func clear() {
            while count > 0 { _ = unsafe pop() }
        }
    }

    /// A level's late arrivals: a binary min-heap by `order`, each entry carrying its
    /// operation's order so that sifting reads no operation.
    @safe
    struct Late {
        @safe
        struct Entry {
            let order: UInt64
            // safety: unretained, as the ring's slots, and under the same `inRing` rule.
            let op: Unmanaged<Operation>
        }
        var entries: [Entry] = []

        var isEmpty: Bool { entries.isEmpty }
        var firstOrder: UInt64 { entries[0].order }

        mutating func push(_ op: Operation) {
            unsafe op.queueFields.inRing = true
            unsafe entries.append(Entry(order: unsafe op.queueFields.order, op: unsafe Unmanaged.passUnretained(op)))
            siftUp(entries.count - 1)
        }

        mutating func pop() -> Unmanaged<Operation> {
            let u = unsafe take(at: 0)
            unsafe u.withGuaranteedReference { unsafe $0.queueFields.inRing = false }
            return unsafe u
        }

        mutating func remove(_ op: Operation) -> Bool {
            // safety: an address compared, never dereferenced.
            let target = unsafe Unmanaged.passUnretained(op).toOpaque()
            guard let i = entries.firstIndex(where: { unsafe $0.op.toOpaque() == target }) else { return false }
            _ = unsafe take(at: i)
            unsafe op.queueFields.inRing = false
            return true
        }

        mutating func clear() {
            while !entries.isEmpty { _ = unsafe pop() }
        }

        /// Takes the entry at `i` out, keeping the heap's order.
        private mutating func take(at i: Int) -> Unmanaged<Operation> {
            let u = unsafe entries[i].op
            let last = entries.removeLast()
            if i < entries.count {
                entries[i] = last
                siftDown(i)
                siftUp(i)
            }
            return unsafe u
        }

        private mutating func siftUp(_ start: Int) {
            var i = start
            while i > 0 {
                let parent = (i - 1) / 2
                guard entries[i].order < entries[parent].order else { return }
                entries.swapAt(i, parent)
                i = parent
            }
        }

        private mutating func siftDown(_ start: Int) {
            var i = start
            while true {
                let left = 2 * i + 1, right = left + 1
                var least = i
                if left < entries.count && entries[left].order < entries[least].order { least = left }
                if right < entries.count && entries[right].order < entries[least].order { least = right }
                if least == i { return }
                entries.swapAt(i, least)
                i = least
            }
        }
    }

    /// How many priority levels there are: 0 (veryLow) ... 4 (veryHigh), and 5 for
    /// barriers (`Operation.barrierLevel`).
    static let levels = 6
    /// One ring per level, allocated with the object.
    private let rings: UnsafeMutablePointer<Ring> = {
        let p = UnsafeMutablePointer<Ring>.allocate(capacity: ReadyRings.levels)
        unsafe p.initialize(repeating: Ring(), count: ReadyRings.levels)
        return unsafe p
    }()

    /// One heap of late arrivals per level.
    private let late: UnsafeMutablePointer<Late> = {
        let p = UnsafeMutablePointer<Late>.allocate(capacity: ReadyRings.levels)
        unsafe p.initialize(repeating: Late(), count: ReadyRings.levels)
        return unsafe p
    }()

    /// Bit `level` is set while that level holds an operation: `pop` finds the highest
    /// non-empty level with one instruction instead of looking at each ring, and an
    /// empty set of rings, which every finish of a serial queue's last operation asks
    /// about, answers at once. Unchecked exclusivity: only touched under the queue's
    /// lock, like the rings.
    @exclusivity(unchecked) private var nonEmpty: UInt8 = 0
    /// Bit `level` is set while that level's heap of late arrivals holds an operation:
    /// without one, a pop takes the ring's first without comparing.
    @exclusivity(unchecked) private var lateNonEmpty: UInt8 = 0

    var isEmpty: Bool { unsafe nonEmpty == 0 }

    /// Adds `op` to its level in its `order`: to the ring when it comes after the
    /// ring's last operation, else to the level's heap.
    @inline(__always)
    func push(_ op: Operation, level: Int) {
        let order = unsafe op.queueFields.order
        if unsafe rings[level].count > 0 && order < rings[level].lastOrder {
            pushLate(op, level: level)
            return
        }
        unsafe rings[level].push(op, order: order)
        unsafe nonEmpty |= 1 << level
    }

    @inline(never)
    private func pushLate(_ op: Operation, level: Int) {
        unsafe late[level].push(op)
        unsafe lateNonEmpty |= 1 << level
        unsafe nonEmpty |= 1 << level
    }

    /// Empties every level: for a drained queue, whose rings can hold only operations
    /// that finished without starting, before its list releases them.
    func clear() {
        for level in 0..<ReadyRings.levels {
            unsafe rings[level].clear()
            unsafe late[level].clear()
        }
        unsafe nonEmpty = 0
        unsafe lateNonEmpty = 0
    }

    /// Takes `op` out of whichever level holds it, keeping the others' order; false when
    /// none does. O(ready operations): for the rare re-prioritisation or readiness
    /// change of an operation that waits for its turn.
    func remove(_ op: Operation) -> Bool {
        for level in 0..<ReadyRings.levels {
            guard unsafe rings[level].remove(op) || late[level].remove(op) else { continue }
            noteTaken(level)
            return true
        }
        return false
    }

    /// The first operation, in `order`, of the highest non-empty level: unretained,
    /// alive while the caller holds the queue's lock (the list holds it).
    @inline(__always)
    func pop() -> Unmanaged<Operation>? {
        guard unsafe nonEmpty != 0 else { return nil }
        let level = unsafe UInt8.bitWidth - 1 - nonEmpty.leadingZeroBitCount
        guard unsafe lateNonEmpty & (1 << level) == 0 else { return unsafe popMerging(level) }
        let u = unsafe rings[level].pop()
        if unsafe rings[level].count == 0 { unsafe nonEmpty &= ~(1 << level) }
        return unsafe u
    }

    /// `pop` at a level with late arrivals: the lower `order` of the ring's first and
    /// the heap's top.
    @inline(never)
    private func popMerging(_ level: Int) -> Unmanaged<Operation> {
        let u: Unmanaged<Operation>
        if unsafe rings[level].count > 0 && rings[level].firstOrder < late[level].firstOrder {
            unsafe u = unsafe rings[level].pop()
        } else {
            unsafe u = unsafe late[level].pop()
        }
        noteTaken(level)
        return unsafe u
    }

    /// Clears the level's bits that an operation taken from it left untrue.
    private func noteTaken(_ level: Int) {
        if unsafe late[level].isEmpty { unsafe lateNonEmpty &= ~(1 << level) }
        if unsafe rings[level].count == 0 && late[level].isEmpty { unsafe nonEmpty &= ~(1 << level) }
    }

    deinit {
        // The slots hold no references; a queue is freed drained, its levels empty.
        for level in 0..<ReadyRings.levels { unsafe rings[level].slots?.deallocate() }
        unsafe rings.deinitialize(count: ReadyRings.levels)
        unsafe rings.deallocate()
        unsafe late.deinitialize(count: ReadyRings.levels)
        unsafe late.deallocate()
    }
}
