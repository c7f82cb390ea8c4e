/// The unretained list of an operation's dependents.
///
/// Why unretained references are safe here. A dependent D is touched through this list
/// only by the dependency finishing, and only while that dependency holds its own lock.
/// D's deinit removes D from every dependency's list under that dependency's lock. So
/// either D deregistered first (and is never touched), or the finishing dependency holds
/// its lock across every touch and D's deinit waits for it: D's memory is valid for as
/// long as anyone uses it. A dependent is retained only when, under its own lock, it is
/// found in a queue and not finishing; its own finish passes through that lock, so its
/// queue, which lets it go only once it has finished, still holds it then (refcount > 0;
/// `Operation.countDownOneEdge`). Nothing is allocated for zero or one dependent (a
/// chain); a wide fan-out uses a dictionary, so removal stays O(1) when many dependents
/// go away at once (cancelAllOperations on thousands waiting for one operation). The
/// dictionary sits in a box that the list retains and releases itself, so that the list
/// costs nothing to destroy (see `Operation.Guarded`); it is empty by the time its
/// operation is freed, since every dependent holds its dependency until it leaves.
///
/// Rejected: weak references. Correct and simple, but each weakly referenced operation
/// gets a side-table allocation, which would cost more than the rest of a dependency
/// chain's step.
@unsafe
enum Dependents {
    // safety: holds unretained operations; every reader keeps the referent alive by the
    // dependency graph's references (OperationLifecycle.swift).
    case none
    case one(Unmanaged<Operation>)
    /// Keyed by the object's address, which needs no reference (and no retain) to
    /// compute: a dependent may be in its deinit while we look. The table is retained
    /// once, made by the second insert and released once it is empty.
    case many(Unmanaged<Table>)

    @safe
    final class Table {
        // safety: the values are unretained dependents, valid as this type's
        // documentation says.
        var all: [UInt: Unmanaged<Operation>] = unsafe [:]
    }

    var isEmpty: Bool { if case .none = unsafe self { return true } else { return false } }

    // safety: keys are addresses, never dereferenced; the values are covered above.
    static func key(_ op: Operation) -> UInt { unsafe key(Unmanaged.passUnretained(op)) }
    static func key(_ u: Unmanaged<Operation>) -> UInt { unsafe UInt(bitPattern: u.toOpaque()) }

    mutating func insert(_ op: Operation) {
        // safety: unretained; this type's documentation says why that is sound.
        let u = unsafe Unmanaged.passUnretained(op)
        switch unsafe self {
        case .none: unsafe self = unsafe .one(u)
        case .one(let first):
            let table = Table()
            unsafe table.all = unsafe [Dependents.key(first): first, Dependents.key(u): u]
            unsafe self = unsafe .many(Unmanaged.passRetained(table))
        case .many(let table):
            // In place: the box is not copied, so the dictionary stays unique.
            unsafe table.takeUnretainedValue().all[Dependents.key(u)] = unsafe u
        }
    }

    /// Removes the operation at `key` if present; returns whether it was.
    @discardableResult
    mutating func remove(key: UInt) -> Bool {
        switch unsafe self {
        case .none: return false
        case .one(let only):
            guard unsafe Dependents.key(only) == key else { return false }
            unsafe self = unsafe .none
            return true
        case .many(let table):
            let box = unsafe table.takeUnretainedValue()
            let removed = unsafe box.all.removeValue(forKey: key) != nil
            if unsafe box.all.isEmpty {
                unsafe table.release()
                unsafe self = .none
            }
            return removed
        }
    }

    /// Empties the list (a finishing operation, which has told every dependent).
    mutating func removeAll() {
        if case .many(let table) = unsafe self { unsafe table.release() }
        unsafe self = .none
    }

    /// Inline, for the usual list of none or one; a table is walked out of line.
    @inline(__always)
    func forEach(_ body: (Unmanaged<Operation>) -> Void) {
        switch unsafe self {
        case .none: break
        case .one(let only): unsafe body(only)
        case .many(let table): unsafe Self.forEach(in: table, body)
        }
    }

    @inline(never)
    private static func forEach(in table: Unmanaged<Table>, _ body: (Unmanaged<Operation>) -> Void) {
        unsafe table.takeUnretainedValue().all.values.forEach(body)
    }
}
