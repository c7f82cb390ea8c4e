import CSpindle
import Synchronization

extension Mutex where Value: ~Copyable {
    /// `withLock`, with the critical section announced to ThreadSanitizer.
    ///
    /// Synchronization's Mutex locks inside a library built without TSan, so under
    /// `swift test --sanitize=thread` TSan would report every access it protects as a
    /// race. The acquire/release annotations (no-ops without TSan) use the address of
    /// the Mutex itself, taken before locking: taking the protected value's address
    /// inside would itself be an access TSan sees before the acquire.
    @inline(__always)
    func locked<Result>(_ body: (inout sending Value) -> sending Result) -> sending Result {
        let address = withUnsafePointer(to: self) { UnsafeMutableRawPointer(mutating: $0) }
        return withLock { (value: inout sending Value) -> sending Result in
            spindle_tsan_acquire(address)
            defer { spindle_tsan_release(address) }
            return body(&value)
        }
    }
}
