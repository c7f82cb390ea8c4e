/// The unretained list of an operation's dependents.
///
/// Why unretained references are safe here. A dependent D is touched through this list
/// only by the dependency finishing, and only while that dependency holds its own lock.
/// D's deinit removes D from every dependency's list under that dependency's lock. So
/// either D deregistered first (and is never touched), or the finishing dependency holds
/// its lock across every touch and D's deinit waits for it: D's memory is valid for as
/// long as anyone uses it. Dependents are retained only when they are in a queue, which
/// keeps them alive (refcount > 0). Nothing is allocated for zero or one dependent (a
/// chain); a wide fan-out uses a dictionary, so removal stays O(1) when many dependents
/// go away at once (cancelAllOperations on thousands waiting for one operation).
///
/// Rejected: weak references. Correct and simple, but each weakly referenced operation
/// gets a side-table allocation, which would cost more than the rest of a dependency
/// chain's step.
enum Dependents {
    case none
    case one(Unmanaged<Operation>)
    /// Keyed by the object's address, which needs no reference (and no retain) to
    /// compute: a dependent may be in its deinit while we look.
    case many([UInt: Unmanaged<Operation>])

    var isEmpty: Bool { if case .none = self { return true } else { return false } }

    static func key(_ op: Operation) -> UInt { key(Unmanaged.passUnretained(op)) }
    static func key(_ u: Unmanaged<Operation>) -> UInt { UInt(bitPattern: u.toOpaque()) }

    mutating func insert(_ op: Operation) {
        let u = Unmanaged.passUnretained(op)
        switch self {
        case .none: self = .one(u)
        case .one(let first): self = .many([Dependents.key(first): first, Dependents.key(u): u])
        case .many(var all):
            self = .none
            all[Dependents.key(u)] = u
            self = .many(all)
        }
    }

    /// Removes the operation at `key` if present; returns whether it was.
    @discardableResult
    mutating func remove(key: UInt) -> Bool {
        switch self {
        case .none: return false
        case .one(let only):
            guard Dependents.key(only) == key else { return false }
            self = .none
            return true
        case .many(var all):
            self = .none
            let removed = all.removeValue(forKey: key) != nil
            self = all.isEmpty ? .none : .many(all)
            return removed
        }
    }

    func forEach(_ body: (Unmanaged<Operation>) -> Void) {
        switch self {
        case .none: break
        case .one(let only): body(only)
        case .many(let all): all.values.forEach(body)
        }
    }
}
