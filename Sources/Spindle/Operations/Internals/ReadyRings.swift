/// The ready operations of a queue: one FIFO ring per priority level, each a buffer of
/// retained references that grows by doubling.
///
/// A class holding plain pointers, mutated in place under the queue's lock, rather than
/// Swift Arrays in the queue's state struct: an Array pays a copy-on-write check (and,
/// now and then, a copy) on every pop, which a serial queue does once per operation.
/// One object per queue, made with it.
final class ReadyRings {
    struct Ring {
        var slots: UnsafeMutablePointer<Unmanaged<Operation>>? = nil
        var capacity = 0
        var head = 0
        var count = 0

        mutating func push(_ op: Operation) {
            if count == capacity { grow() }
            slots.unsafelyUnwrapped[(head + count) & (capacity - 1)] = Unmanaged.passRetained(op)
            count += 1
        }

        mutating func pop() -> Operation {
            let u = slots.unsafelyUnwrapped[head]
            head = (head + 1) & (capacity - 1)
            count -= 1
            return u.takeRetainedValue()
        }

        mutating func grow() {
            let newCapacity = max(8, capacity * 2) // a power of two: indices wrap by masking
            let grown = UnsafeMutablePointer<Unmanaged<Operation>>.allocate(capacity: newCapacity)
            for i in 0..<count { (grown + i).initialize(to: slots.unsafelyUnwrapped[(head + i) & (capacity - 1)]) }
            slots?.deallocate()
            slots = grown
            capacity = newCapacity
            head = 0
        }

        mutating func remove(_ op: Operation) -> Bool {
            let target = Unmanaged.passUnretained(op).toOpaque()
            guard let i = (0..<count).first(where: {
                slots.unsafelyUnwrapped[(head + $0) & (capacity - 1)].toOpaque() == target
            }) else { return false }
            let removed = slots.unsafelyUnwrapped[(head + i) & (capacity - 1)]
            for j in i..<(count - 1) {
                slots.unsafelyUnwrapped[(head + j) & (capacity - 1)] = slots.unsafelyUnwrapped[(head + j + 1) & (capacity - 1)]
            }
            count -= 1
            removed.release()
            return true
        }

        mutating func releaseAll() {
            while count > 0 { _ = pop() }
            slots?.deallocate()
            slots = nil
            capacity = 0
        }
    }

    /// How many priority levels there are: 0 (veryLow) ... 4 (veryHigh).
    static let levels = 5
    /// One ring per level, allocated with the object.
    private let rings: UnsafeMutablePointer<Ring> = {
        let p = UnsafeMutablePointer<Ring>.allocate(capacity: ReadyRings.levels)
        p.initialize(repeating: Ring(), count: ReadyRings.levels)
        return p
    }()

    var isEmpty: Bool { (0..<ReadyRings.levels).allSatisfy { rings[$0].count == 0 } }

    func push(_ op: Operation, level: Int) { rings[level].push(op) }

    /// Takes `op` out of whichever ring holds it, keeping the others' order; false when
    /// none does. O(ready operations): for the rare re-prioritisation or readiness
    /// change of an operation that waits for its turn.
    func remove(_ op: Operation) -> Bool {
        for level in 0..<ReadyRings.levels where rings[level].remove(op) { return true }
        return false
    }

    /// The oldest operation of the highest non-empty level.
    func pop() -> Operation? {
        for level in (0..<ReadyRings.levels).reversed() where rings[level].count > 0 {
            return rings[level].pop()
        }
        return nil
    }

    deinit {
        for level in 0..<ReadyRings.levels { rings[level].releaseAll() }
        rings.deinitialize(count: ReadyRings.levels)
        rings.deallocate()
    }
}
