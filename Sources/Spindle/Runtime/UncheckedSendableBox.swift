/// A value handed to another thread that Swift cannot prove may cross: each use says
/// why it may (the thread it goes to is the only one that touches it from then on, or
/// what it holds is itself synchronised).
struct UncheckedSendableBox<T>: @unchecked Sendable {
    // @unchecked: see above; the box adds no synchronisation of its own.
    let value: T
    init(_ v: T) { value = v }
}
