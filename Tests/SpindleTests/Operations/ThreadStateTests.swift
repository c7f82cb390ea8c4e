import Foundation
import Synchronization
import XCTest

@testable import Spindle

/// The façade's per-thread state (ThreadState.swift): one per thread, found through the
/// engine's thread-local slot, freed when its thread exits.
final class ThreadStateTests: XCTestCase {
    private final class Seen: @unchecked Sendable {
        // @unchecked: written by the thread under test, read after it has been joined.
        weak var first: ThreadState?
        weak var second: ThreadState?
        var same = false
        var lateBudget = -1
    }

    func testEachThreadHasOneStateFreedWhenItExits() {
        let seen = Seen()
        onThreadThatExits {
            let a = ThreadState.current, b = ThreadState.current
            seen.same = a === b
            seen.first = a
        }
        XCTAssertTrue(seen.same, "a thread's state is made once")
        XCTAssertNil(seen.first, "the thread's exit freed its state")
        XCTAssertFalse(ThreadState.current === seen.first, "this thread has a state of its own")
    }

    /// Code that runs during a thread's exit after the state was freed — another key's
    /// destructor — gets a fresh state, not the freed one, and that one is freed too.
    func testAStateNeededAfterTheThreadsStateWasFreedIsMadeAgainAndFreed() {
        let seen = Seen()
        // Keys are destroyed in the order they were made (glibc): the façade's key is
        // made first (with this thread's state), so this key's destructor runs after
        // the façade's. Its value is `seen`, unretained (the test keeps it).
        _ = ThreadState.current
        var key = pthread_key_t()
        XCTAssertEqual(pthread_key_create(&key) { p in
            let seen = Unmanaged<Seen>.fromOpaque(p!).takeUnretainedValue()
            // Unretained, as the façade reads it: a stale slot would name freed memory,
            // which still holds the first state's mark (or, under ASan, is reported).
            let late = ThreadState.unmanagedCurrent
            seen.lateBudget = late._withUnsafeGuaranteedRef { $0.chainBudget }
            seen.second = late.takeUnretainedValue()
        }, 0)
        defer { pthread_key_delete(key) }
        let keyCopy = key
        onThreadThatExits {
            let first = ThreadState.current
            first.chainBudget = 12_345 // a mark a fresh state does not have
            seen.first = first
            pthread_setspecific(keyCopy, Unmanaged.passUnretained(seen).toOpaque())
        }
        XCTAssertEqual(seen.lateBudget, 0, "the late caller got the freed state, not a fresh one")
        XCTAssertNil(seen.first, "the thread's first state was freed")
        XCTAssertNil(seen.second, "the state made during the exit was freed too")
    }
}
