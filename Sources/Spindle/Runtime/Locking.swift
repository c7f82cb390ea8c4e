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
        let address = unsafe withUnsafePointer(to: self) { unsafe UnsafeMutableRawPointer(mutating: $0) }
        return withLock { (value: inout sending Value) -> sending Result in
            unsafe spindle_tsan_acquire(address)
            defer { unsafe spindle_tsan_release(address) }
            return body(&value)
        }
    }
}

/// A value behind a `spindle_mutex` (spin briefly, then sleep on a futex), in one
/// allocation: what the queues use for their state.
///
/// Synchronization's Mutex is a priority-inheritance futex on Linux; contended, its
/// waiters sleep in the kernel at once. An operation queue's lock is taken by the
/// thread adding operations and by every worker finishing one, each time for a fraction
/// of a microsecond, so it is often contended and almost never held long: spinning
/// first is the right trade there (see Sources/CSpindle/mutex.c).
struct FutexLocked<Value>: @unchecked Sendable {
    // @unchecked: the value is only reached through `locked`, under the mutex.
    private let buffer: ManagedBuffer<Value, spindle_mutex>

    init(_ value: Value) {
        buffer = ManagedBuffer.create(minimumCapacity: 1) { _ in value }
        unsafe buffer.withUnsafeMutablePointerToElements { unsafe spindle_mutex_init($0) }
    }

    /// Runs `body` with exclusive access to the value.
    @inline(__always)
    func locked<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        unsafe try buffer.withUnsafeMutablePointers { value, mutex in
            unsafe spindle_mutex_lock(mutex)
            defer { unsafe spindle_mutex_unlock(mutex) }
            return unsafe try body(&value.pointee)
        }
    }
}
