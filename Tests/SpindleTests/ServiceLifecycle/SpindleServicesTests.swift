#if ServiceLifecycle // the trait scripts/test.sh enables
import Foundation
import ServiceLifecycle
import ServiceLifecycleTestKit
import Synchronization
import XCTest

@testable import Spindle
@testable import SpindleServiceLifecycle

final class SpindleServicesTests: XCTestCase {
    func testGracefulShutdownStopsAdmittingAndDrainsThePool() async throws {
        let pool = try ThreadPool(workers: 2)
        let ran = Atomic<Int>(0)
        for _ in 0..<500 { try pool.submit { usleep(50); ran.add(1, ordering: .relaxed) } }
        try await testGracefulShutdown { trigger in
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await ThreadPoolService(pool).run() }
                trigger.triggerGracefulShutdown()
                try await group.waitForAll()
            }
        }
        XCTAssertEqual(ran.load(ordering: .relaxed), 500, "graceful shutdown lost queued work")
        XCTAssertThrowsError(try pool.submit {}) { XCTAssertEqual($0 as? ThreadPool.Error, .shutDown) }
    }

    func testCancellingTheServiceCancelsThePoolsQueue() async throws {
        let pool = try holdablePool(workers: 1)
        let blocker = Blocker()
        try blocker.occupy(pool)
        let ran = Atomic<Int>(0)
        for _ in 0..<100 { try pool.submit { ran.add(1, ordering: .relaxed) } }
        let service = Task { try await ThreadPoolService(pool).run() }
        service.cancel()
        // The cancelling shutdown has begun once the pool says so (its mode is set in the
        // same step): only then may the worker go back to the queue.
        while !pool.isShuttingDown { try await Task.sleep(for: .milliseconds(1)) }
        blocker.open()
        try await service.value
        XCTAssertEqual(ran.load(ordering: .relaxed), 0, "a cancelled service ran queued work")
    }

    func testAQueueServiceWaitsForTheQueueToEmpty() async throws {
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 2
        let ran = Atomic<Int>(0)
        for _ in 0..<200 { queue.addOperation { usleep(50); ran.add(1, ordering: .relaxed) } }
        try await testGracefulShutdown { trigger in
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await OperationQueueService(queue).run() }
                trigger.triggerGracefulShutdown()
                try await group.waitForAll()
            }
        }
        XCTAssertEqual(ran.load(ordering: .relaxed), 200)
        XCTAssertEqual(queue.operationCount, 0)
    }
}
#endif
