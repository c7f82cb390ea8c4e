import CSpindle
import CSpindleTesting
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
        let locked = FutexLocked(0)
        // Every 64th section is long: forces the futex path.
        checkMutualExclusion(threads: 4, rounds: Stress.count(20_000), longEvery: 64,
                             withLock: { body in locked.locked { body(&$0) } },
                             total: { locked.locked { $0 } })
    }

    /// Synchronization's Mutex, taken through `locked` (Runtime/Locking.swift) by threads whose
    /// critical sections are long enough that the others reach its contended path, where
    /// the kernel hands the lock over inside a library ThreadSanitizer cannot see.
    /// Without TSan this checks mutual exclusion; under `--sanitize=thread` it fails
    /// (TSan reports a race on the counter) if `locked` stops announcing the critical
    /// section, as it does with a plain `withLock` (checked by making that change).
    /// The annotations are on exactly when the process runs under ThreadSanitizer:
    /// `spindle_tsan_active`, set before main, decides whether each one calls TSan.
    func testTheLockAnnotationsAreOnExactlyUnderTSan() {
        XCTAssertEqual(spindle_tsan_is_active(), Stress.isTSan)
    }

    func testAContendedSynchronizationMutexTakenThroughLockedIsVisibleToTSan() {
        let counter = Mutex(0)
        checkMutualExclusion(threads: 3, rounds: Stress.count(2_000), longEvery: 16,
                             withLock: { body in counter.locked { body(&$0) } },
                             total: { counter.locked { $0 } })
    }

    /// Runs `threads` threads at once, each incrementing a plain counter `rounds` times
    /// through `withLock`, which runs its argument on the counter under the lock under
    /// test; every `longEvery`-th critical section (offset per thread) is long. Fails if
    /// a thread does not finish in a minute (a lost wake-up), or if `total` then reads
    /// fewer than `threads × rounds` increments (two holders at once).
    private func checkMutualExclusion(threads: Int, rounds: Int, longEvery: Int,
                                      withLock: @escaping @Sendable ((inout Int) -> Void) -> Void,
                                      total: () -> Int) {
        let started = DispatchGroup()
        let finished = DispatchSemaphore(value: 0)
        for t in 0..<threads {
            started.enter()
            Thread {
                started.leave()
                for i in 0..<rounds {
                    let long = (i + t) % longEvery == 0
                    withLock { value in
                        let v = value
                        if long { for _ in 0..<2_000 { spindle_test_relax() } }
                        value = v + 1
                    }
                }
                finished.signal()
            }.start()
        }
        started.wait()
        for _ in 0..<threads {
            XCTAssertEqual(finished.wait(timeout: .now() + 60), .success, "a waiter was never woken")
        }
        XCTAssertEqual(total(), threads * rounds, "increments were lost: two holders at once")
    }

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
