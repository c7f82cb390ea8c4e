import Foundation
import Synchronization
import XCTest

@testable import Spindle

/// An actor on Spindle's workers, at its class's nice value.
actor Tally {
    static let executor = ActorExecutor(qualityOfService: .utility)
    nonisolated var unownedExecutor: UnownedSerialExecutor { Self.executor.asUnownedSerialExecutor() }

    private var count = 0
    private var log: [Int] = []
    /// Set while a job of this actor runs: two at once is a broken isolation.
    private let inside = Atomic<Bool>(false)
    private(set) var overlaps = 0

    func add(_ i: Int) {
        if inside.exchange(true, ordering: .acquiringAndReleasing) { overlaps += 1 }
        count += 1
        // Long enough for another worker to collide, were the executor not serial.
        for _ in 0..<200 { _ = count &* 3 }
        inside.store(false, ordering: .releasing)
    }

    func record(_ i: Int) { log.append(i) }

    var total: Int { count }
    var recorded: [Int] { log }

    /// Where this actor's code runs, and at which nice.
    func whereAmI() -> (onUtilityWorker: Bool, nice: Int, name: String) {
        (ThreadPool.forQualityOfService(.utility).isCurrentThreadWorker, currentThreadNice(), currentThreadName())
    }
}

final class ActorExecutorTests: XCTestCase {
    func testAnActorRunsOnItsClassWorkersAtItsNiceValue() async {
        let tally = Tally()
        let (onWorker, nice, name) = await tally.whereAmI()
        XCTAssertTrue(onWorker, "the actor's code ran off the utility workers (thread \(name))")
        XCTAssertTrue(name.hasPrefix("spindle-ut"), name)
        XCTAssertEqual(nice, Int(ThreadPool.forQualityOfService(.utility).effectiveNice))
    }

    func testNeverTwoJobsOfOneActorAtOnce() async {
        let tally = Tally()
        let n = Stress.count(5000)
        await withTaskGroup(of: Void.self) { group in
            for i in 0..<n { group.addTask { await tally.add(i) } }
        }
        let total = await tally.total
        let overlaps = await tally.overlaps
        XCTAssertEqual(total, n)
        XCTAssertEqual(overlaps, 0, "two jobs of one actor ran at once")
    }

    func testOneCallersMessagesArriveInOrder() async {
        let tally = Tally()
        for i in 0..<500 { await tally.record(i) }
        let recorded = await tally.recorded
        XCTAssertEqual(recorded, Array(0..<500))
    }

    func testAnActorOnAPoolThatShutDownStillRunsItsJobs() async throws {
        let pool = try ThreadPool(workers: 1)
        let executor = ActorExecutor(pool: pool)
        actor Counter {
            let executor: ActorExecutor
            nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
            var n = 0
            init(_ executor: ActorExecutor) { self.executor = executor }
            func bump() { n += 1 }
        }
        let counter = Counter(executor)
        await counter.bump()
        try await pool.shutdown()
        for _ in 0..<100 { await counter.bump() }
        let n = await counter.n
        XCTAssertEqual(n, 101, "a job of an actor on a shut-down pool was lost")
    }
}
