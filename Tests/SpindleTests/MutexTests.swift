import CSpindle
import Foundation
@testable import Spindle
import Synchronization
import XCTest

/// The queues' lock (Sources/CSpindle/mutex.c): spin briefly, then sleep on a futex.
final class MutexTests: XCTestCase {
    /// Threads increment a plain (non-atomic) counter under the lock, with critical
    /// sections long enough that contenders exhaust their spin and sleep: a lost
    /// increment means two holders at once; a hang means a lost wake-up (M2).
    func testMutualExclusionAndNoLostWakeUpUnderContention() {
        let threads = 4
        let rounds = Stress.count(20_000)
        let locked = FutexLocked(0)
        // Every 64th section is long: forces the futex path.
        contend(threads: threads, rounds: rounds, longEvery: 64) { long in
            locked.locked { value in
                let v = value
                if long { Self.holdForAWhile() }
                value = v + 1
            }
        }
        XCTAssertEqual(locked.locked { $0 }, threads * rounds, "increments were lost: two holders at once")
    }

    /// Synchronization's Mutex, taken through `locked` (Locking.swift) by threads whose
    /// critical sections are long enough that the others reach its contended path, where
    /// the kernel hands the lock over inside a library ThreadSanitizer cannot see.
    /// Without TSan this checks mutual exclusion; under `--sanitize=thread` it fails
    /// (TSan reports a race on the counter) if `locked` stops announcing the critical
    /// section, as it does with a plain `withLock` (checked by making that change).
    func testAContendedSynchronizationMutexTakenThroughLockedIsVisibleToTSan() {
        let threads = 3
        let rounds = Stress.count(2_000)
        let counter = Mutex(0)
        contend(threads: threads, rounds: rounds, longEvery: 16) { long in
            counter.locked { value in
                let v = value
                if long { Self.holdForAWhile() }
                value = v + 1
            }
        }
        XCTAssertEqual(counter.locked { $0 }, threads * rounds, "increments were lost: two holders at once")
    }

    /// Runs `threads` threads at once, each calling `increment` `rounds` times; its
    /// argument is true for every `longEvery`-th call (offset per thread), where the
    /// critical section should be long. Fails if a thread does not finish in a minute.
    private func contend(threads: Int, rounds: Int, longEvery: Int,
                         _ increment: @escaping @Sendable (_ long: Bool) -> Void) {
        let started = DispatchGroup()
        let finished = DispatchSemaphore(value: 0)
        for t in 0..<threads {
            started.enter()
            Thread {
                started.leave()
                for i in 0..<rounds { increment((i + t) % longEvery == 0) }
                finished.signal()
            }.start()
        }
        started.wait()
        for _ in 0..<threads {
            XCTAssertEqual(finished.wait(timeout: .now() + 60), .success, "a waiter was never woken")
        }
    }

    /// A few microseconds of work inside a critical section.
    private static func holdForAWhile() { for _ in 0..<2_000 { spindle_test_relax() } }

    func testTryLockFailsWhileHeldAndSucceedsAfter() {
        let m = UnsafeMutablePointer<spindle_mutex>.allocate(capacity: 1)
        defer { m.deallocate() }
        spindle_mutex_init(m)
        XCTAssertTrue(spindle_mutex_trylock(m))
        XCTAssertFalse(spindle_mutex_trylock(m))
        spindle_mutex_unlock(m)
        XCTAssertTrue(spindle_mutex_trylock(m))
        spindle_mutex_unlock(m)
    }
}
