import CSpindle
import CSpindleTesting
import Foundation
import Glibc
import Synchronization
import XCTest

@testable import Spindle

/// A process that uses Spindle and then forks: in the child, pools made before the fork
/// refuse work clearly (their threads are not there), and the process-wide pools that
/// operation queues and `ThreadPool.shared` use are made anew on first use.
final class ForkTests: XCTestCase {
    /// Forks; the child runs `body` and exits with what it returns. The child's status,
    /// 124 if it did not finish within `seconds` (it is then killed).
    func inChild(within seconds: Double = 120, _ body: () -> Int32) -> Int32 {
        let pid = fork()
        if pid == 0 { _exit(body()) }
        XCTAssertGreaterThan(pid, 0, "fork failed")
        let deadline = Date().addingTimeInterval(seconds)
        var status: Int32 = 0
        while true {
            let r = waitpid(pid, &status, WNOHANG)
            if r == pid { break }
            if Date() > deadline {
                kill(pid, SIGKILL)
                waitpid(pid, &status, 0)
                return 124
            }
            usleep(1_000)
        }
        return (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
    }

    func testAChildKeepsUsingTheSharedPoolAndOperationQueues() throws {
        if Stress.isTSan { throw XCTSkip("ThreadSanitizer does not allow threads after fork") }
        // The parent uses everything first.
        let before = try ThreadPool(workers: 1)
        let q = OperationQueue()
        q.addOperation {}
        q.waitUntilAllOperationsAreFinished()
        let sharedBefore = ThreadPool.shared
        try sharedBefore.submit {}
        // Fork from a quiet process: a thread inside the Swift runtime at fork() leaves
        // its locks held in the child for ever (a hazard of fork() in any multithreaded
        // process, not Spindle's).
        XCTAssertTrue(eventually { spindle_pool_is_idle(sharedBefore.raw) && spindle_pool_is_idle(before.raw) })
        usleep(20_000)
        let status = inChild {
            // A pool made before the fork refuses, saying why.
            do {
                try before.submit {}
                return 10
            } catch ThreadPool.Error.createdBeforeFork {
            } catch { return 11 }
            // Entering it runs the work on the calling thread instead of hanging.
            if before.run({ 7 }) != 7 { return 12 }
            // The shared pool is a new one, and it runs work.
            let shared = ThreadPool.shared
            if shared === sharedBefore { return 13 }
            let done = DispatchSemaphore(value: 0)
            do { try shared.submit { done.signal() } } catch { return 14 }
            if done.wait(timeout: .now() + 60) != .success { return 15 }
            // Operation queues, old and new, run their operations.
            let ran = Atomic<Int>(0)
            for queue in [q, OperationQueue()] {
                for _ in 0..<10 { queue.addOperation { ran.add(1, ordering: .relaxed) } }
                queue.waitUntilAllOperationsAreFinished()
            }
            if ran.load(ordering: .relaxed) != 20 { return 16 }
            // A class pool too.
            let utility = DispatchSemaphore(value: 0)
            let op = BlockOperation { utility.signal() }
            op.qualityOfService = .utility
            OperationQueue().addOperation(op)
            if utility.wait(timeout: .now() + 60) != .success { return 17 }
            return 0
        }
        XCTAssertEqual(status, 0, "the child failed at step \(status) (124: it hung)")
        try before.shutdown()
    }

    /// A process can fork while another of its threads is creating a pool. In the child
    /// that copy has no threads: it must count as inherited (refusing work), and the
    /// monitor the child starts must not watch it, or it would see a worker that never
    /// parks and never sleep.
    func testAPoolBeingCreatedAtForkIsInheritedAndUnwatchedInTheChild() throws {
        if Stress.isTSan { throw XCTSkip("ThreadSanitizer does not allow threads after fork") }
        let status = spindle_test_pool_half_registered_at_fork(120_000)
        XCTAssertEqual(status, 0, [68: "the child's monitor never slept: it watches the copied pool",
                                   69: "the copied pool accepted work"][status] ?? "child status \(status)")
    }

    func testAChildThatExecsIsUnaffected() throws {
        if Stress.isTSan { throw XCTSkip("ThreadSanitizer does not allow threads after fork") }
        try ThreadPool.shared.submit {}
        let status = inChild {
            let args: [UnsafeMutablePointer<CChar>?] = [strdup("/bin/true"), nil]
            execv("/bin/true", args)
            return 99 // exec failed
        }
        XCTAssertEqual(status, 0)
    }
}
