/// The ready operations of a queue: one FIFO ring per priority level, each a buffer of
/// unretained references that grows by doubling.
///
/// A class holding plain pointers, mutated in place under the queue's lock, rather than
/// Swift Arrays in the queue's state struct: an Array pays a copy-on-write check (and,
/// now and then, a copy) on every pop, which a serial queue does once per operation.
/// One object per queue, made with it.
///
/// The slots hold no reference: the queue's list holds every operation in a ring, and
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

        mutating func push(_ op: Operation) {
            if count == capacity { grow() }
            unsafe op.queueFields.inRing = true
            // safety: unretained; the list keeps it while `inRing` is set.
            unsafe slots.unsafelyUnwrapped[(head + count) & (capacity - 1)] = unsafe Unmanaged.passUnretained(op)
            count += 1
        }

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

    /// How many priority levels there are: 0 (veryLow) ... 4 (veryHigh).
    static let levels = 5
    /// One ring per level, allocated with the object.
    private let rings: UnsafeMutablePointer<Ring> = {
        let p = UnsafeMutablePointer<Ring>.allocate(capacity: ReadyRings.levels)
        unsafe p.initialize(repeating: Ring(), count: ReadyRings.levels)
        return unsafe p
    }()

    /// Bit `level` is set while that ring holds an operation: `pop` finds the highest
    /// non-empty level with one instruction instead of looking at each ring, and an
    /// empty set of rings, which every finish of a serial queue's last operation asks
    /// about, answers at once. Unchecked exclusivity: only touched under the queue's
    /// lock, like the rings.
    @exclusivity(unchecked) private var nonEmpty: UInt8 = 0

    var isEmpty: Bool { unsafe nonEmpty == 0 }

    func push(_ op: Operation, level: Int) {
        unsafe rings[level].push(op)
        unsafe nonEmpty |= 1 << level
    }

    /// Empties every ring: for a drained queue, whose rings can hold only operations
    /// that finished without starting, before its list releases them.
    func clear() {
        for level in 0..<ReadyRings.levels { unsafe rings[level].clear() }
        unsafe nonEmpty = 0
    }

    /// Takes `op` out of whichever ring holds it, keeping the others' order; false when
    /// none does. O(ready operations): for the rare re-prioritisation or readiness
    /// change of an operation that waits for its turn.
    func remove(_ op: Operation) -> Bool {
        for level in 0..<ReadyRings.levels where unsafe rings[level].remove(op) {
            if unsafe rings[level].count == 0 { unsafe nonEmpty &= ~(1 << level) }
            return true
        }
        return false
    }

    /// The oldest operation of the highest non-empty level: unretained, alive while
    /// the caller holds the queue's lock (the list holds it).
    func pop() -> Unmanaged<Operation>? {
        guard unsafe nonEmpty != 0 else { return nil }
        let level = unsafe UInt8.bitWidth - 1 - nonEmpty.leadingZeroBitCount
        let u = unsafe rings[level].pop()
        if unsafe rings[level].count == 0 { unsafe nonEmpty &= ~(1 << level) }
        return unsafe u
    }

    deinit {
        // The slots hold no references; a queue is freed drained, its rings empty.
        for level in 0..<ReadyRings.levels { unsafe rings[level].slots?.deallocate() }
        unsafe rings.deinitialize(count: ReadyRings.levels)
        unsafe rings.deallocate()
    }
}
