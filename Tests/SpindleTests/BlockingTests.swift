import Foundation
import Synchronization
import XCTest

@testable import Spindle

/// Work that blocks its thread: waits block (no nested execution), and the pool runs
/// spare workers meanwhile, so that the CPUs stay busy and width means what it says.
final class BlockingTests: XCTestCase {
    func testAWorkerBlockedOnASemaphoreIsCompensatedByTheMonitor() throws {
        let pool = try ThreadPool(workers: 1)
        defer { try? pool.shutdown() }
        let sem = DispatchSemaphore(value: 0)
        let done = DispatchSemaphore(value: 0)
        try pool.submit {
            sem.wait() // blocks the pool's only worker; Spindle is not told
            done.signal()
        }
        usleep(20_000)
        try pool.submit { sem.signal() }
        XCTAssertEqual(done.wait(timeout: .now() + 10), .success, "the blocked worker was not compensated")
    }

    func testThreadPoolBlockingCompensatesAtOnce() throws {
        let pool = try ThreadPool(workers: 1)
        defer { try? pool.shutdown() }
        let sem = DispatchSemaphore(value: 0)
        let done = DispatchSemaphore(value: 0)
        try pool.submit {
            ThreadPool.blocking { sem.wait() }
            done.signal()
        }
        usleep(20_000)
        try pool.submit { sem.signal() }
        XCTAssertEqual(done.wait(timeout: .now() + 10), .success, "the blocked worker was not compensated")
    }
}
