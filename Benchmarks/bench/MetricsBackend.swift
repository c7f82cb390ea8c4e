import CoreMetrics
import Spindle
import Synchronization

/// A metrics backend for the benchmark's `spindle-metrics` systems: keeps the latest
/// value of each metric in an atomic, as an in-process exporter's registry would, so
/// that publishing costs what it would with a real backend bootstrapped.
final class BenchMetricsFactory: MetricsFactory {
    final class Handler: CounterHandler, FloatingPointCounterHandler, RecorderHandler, TimerHandler, MeterHandler, Sendable {
        let bits = Atomic<Int64>(0)
        func increment(by amount: Int64) { bits.add(amount, ordering: .relaxed) }
        func increment(by amount: Double) { bits.add(Int64(amount * 1e9), ordering: .relaxed) }
        func reset() { bits.store(0, ordering: .relaxed) }
        func record(_ value: Int64) { bits.store(value, ordering: .relaxed) }
        func record(_ value: Double) { bits.store(Int64(value), ordering: .relaxed) }
        func recordNanoseconds(_ duration: Int64) { bits.store(duration, ordering: .relaxed) }
        func set(_ value: Int64) { bits.store(value, ordering: .relaxed) }
        func set(_ value: Double) { bits.store(Int64(value), ordering: .relaxed) }
        func decrement(by amount: Int64) { bits.subtract(amount, ordering: .relaxed) }
        func decrement(by amount: Double) { bits.subtract(Int64(amount), ordering: .relaxed) }
    }

    func makeCounter(label: String, dimensions: [(String, String)]) -> any CounterHandler { Handler() }
    func makeFloatingPointCounter(label: String, dimensions: [(String, String)]) -> any FloatingPointCounterHandler { Handler() }
    func makeRecorder(label: String, dimensions: [(String, String)], aggregate: Bool) -> any RecorderHandler { Handler() }
    func makeTimer(label: String, dimensions: [(String, String)]) -> any TimerHandler { Handler() }
    func makeMeter(label: String, dimensions: [(String, String)]) -> any MeterHandler { Handler() }
    func destroyCounter(_ handler: any CounterHandler) {}
    func destroyFloatingPointCounter(_ handler: any FloatingPointCounterHandler) {}
    func destroyRecorder(_ handler: any RecorderHandler) {}
    func destroyTimer(_ handler: any TimerHandler) {}
    func destroyMeter(_ handler: any MeterHandler) {}

    /// Bootstraps the backend, once per process.
    static let bootstrapped: Void = { MetricsSystem.bootstrap(BenchMetricsFactory()) }()
}

/// Runs `body` while `PoolMetrics` publishes `pools` (nil: the quality-of-service
/// classes) ten times a second: what the `spindle-metrics` systems add to `spindle`.
func withMetricsPublished<T>(_ pools: [String: ThreadPool]?, _ body: () throws -> T) rethrows -> T {
    BenchMetricsFactory.bootstrapped
    let publisher = pools.map { PoolMetrics(pools: $0, every: .milliseconds(100)) } ?? PoolMetrics(every: .milliseconds(100))
    defer { publisher.stop() }
    return try body()
}
