import CoreMetrics
import Foundation
import MetricsTestKit
import Synchronization
import XCTest

@testable import Spindle

/// The metrics backend for the whole test process (swift-metrics bootstraps once).
let testMetrics: TestMetrics = {
    let m = TestMetrics()
    MetricsSystem.bootstrap(m)
    return m
}()

final class PoolMetricsTests: XCTestCase {
    func testAPoolsCountersGaugesAndTimersArePublished() async throws {
        let metrics = testMetrics
        let pool = try ThreadPool(workers: 2)
        // An hour between rounds: the first round runs as the publisher starts, before any
        // task, so every count below comes from the round `stop()` runs before returning.
        let publisher = PoolMetrics(pools: ["resize": pool], every: .seconds(3600))
        let done = Countdown(1000)
        for _ in 0..<1000 { try pool.submit { done.hit() } }
        done.wait()
        for i in 0..<50 { _ = try await pool.run { i * 2 } }
        let dims = [("pool", "resize")]
        publisher.stop() // publishes everything up to here before it returns
        let executed = try metrics.expectCounter("spindle_tasks_executed_total", dims).totalValue
        XCTAssertGreaterThanOrEqual(executed, 1050, "executed tasks were not counted")
        XCTAssertEqual(try metrics.expectTimer("spindle_offload_queue_delay", dims).values.count, 50)
        XCTAssertEqual(try metrics.expectTimer("spindle_offload_run_time", dims).values.count, 50)
        // 1000 submissions from this one thread: one in 256 timed, whatever this thread
        // submitted before.
        let sampledCount = 1000 / ThreadPool.submitSamplingPeriod
        XCTAssert((sampledCount...sampledCount + 1).contains(try metrics.expectTimer("spindle_task_queue_delay", dims).values.count))
        XCTAssert((sampledCount...sampledCount + 1).contains(try metrics.expectTimer("spindle_task_run_time", dims).values.count))
        XCTAssertNotNil(try metrics.expectGauge("spindle_workers_parked", dims).lastValue)
        XCTAssertNotNil(try metrics.expectGauge("spindle_tasks_queued", dims).lastValue)
        XCTAssertNotNil(try metrics.expectGauge("spindle_workers_running", dims).lastValue)
        XCTAssertEqual(try metrics.expectGauge("spindle_workers_active", dims).lastValue, 2)
        _ = try metrics.expectCounter("spindle_cpu_seconds_total", dims)
        // Once stopped, offloads are no longer timed.
        _ = try await pool.run { 1 }
        XCTAssertEqual(try metrics.expectTimer("spindle_offload_run_time", dims).values.count, 50)
        try await pool.shutdown()
    }

    func testRefusalsAreCounted() throws {
        let metrics = testMetrics
        let pool = try holdablePool(workers: 1, queueLimit: 1)
        let blocker = Blocker()
        try blocker.occupy(pool)
        let publisher = PoolMetrics(pools: ["limited": pool], every: .seconds(3600))
        XCTAssertTrue(pool.trySubmit {})
        for _ in 0..<7 { XCTAssertFalse(pool.trySubmit {}) }
        publisher.stop()
        XCTAssertEqual(try metrics.expectCounter("spindle_tasks_refused_total", [("pool", "limited")]).totalValue, 7)
        blocker.open()
        try pool.shutdown()
    }

    func testTheClassPoolsArePublishedWithTheirQualityOfService() throws {
        let metrics = testMetrics
        let publisher = PoolMetrics(every: .milliseconds(5))
        _ = ThreadPool.forQualityOfService(.background).run { usleep(1000) }
        publisher.stop()
        _ = try metrics.expectCounter("spindle_tasks_executed_total", [("pool", "spindle-bg"), ("qos", "background")])
        _ = try metrics.expectCounter("spindle_cpu_seconds_total", [("pool", "spindle-w"), ("qos", "default")])
        // The process's own: the CPU limit (0 here, where the tests run without one, or
        // the limit's CPUs), published with the class pools.
        XCTAssertEqual(try metrics.expectGauge("spindle_cpu_limit").lastValue, ThreadPool.cpuLimit?.cpus ?? 0)
    }
}
