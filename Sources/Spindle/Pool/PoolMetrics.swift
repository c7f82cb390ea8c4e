import CSpindle
import CoreMetrics
import Foundation
import Synchronization

/// Publishes pools' metrics through swift-metrics, for whatever backend the program
/// bootstrapped (`MetricsSystem.bootstrap`: Prometheus, StatsD, OpenTelemetry, …).
///
/// ```swift
/// MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: registry))
/// let metrics = PoolMetrics()          // the quality-of-service classes, every second
/// ```
///
/// The metrics are created once, with fixed dimensions — `pool` (its thread-name
/// prefix, or the name given) and, for the process-wide pools, `qos` — and updated
/// periodically from the engine's per-worker counters, so the paths that submit and run
/// work pay nothing for them:
///
/// | metric | kind | what |
/// |---|---|---|
/// | `spindle_tasks_executed_total` | counter | tasks run |
/// | `spindle_tasks_stolen_total` | counter | tasks a worker took from another's deque |
/// | `spindle_tasks_refused_total` | counter | submissions refused: over the queue limit, or after shutdown |
/// | `spindle_tasks_queued` | gauge | tasks queued and not started (an estimate while the pool is busy) |
/// | `spindle_workers_running` | gauge | workers not parked, spares included |
/// | `spindle_workers_parked` | gauge | workers parked |
/// | `spindle_cpu_seconds_total` | floating-point counter | CPU time the pool's threads used |
/// | `spindle_offload_queue_delay` | timer | `ThreadPool.run(_:)` (async): from the call to the closure's start |
/// | `spindle_offload_run_time` | timer | `ThreadPool.run(_:)` (async): the closure's own time |
/// | `spindle_task_queue_delay` | timer | `ThreadPool.submit(_:)`, one call in 256 per thread: from the call to the closure's start |
/// | `spindle_task_run_time` | timer | `ThreadPool.submit(_:)`, the same sample: the closure's own time |
/// | `spindle_promotions_total` | counter | with `kind`: `moved` (queued work moved to a higher class), `raised` (a running operation's thread raised), `refused` (a raise the kernel refused); the class form only, process-wide |
/// | `spindle_cpu_limit` | gauge | the container's CPU limit in CPUs (0: none); the class form only |
/// | `spindle_workers_active` | gauge | workers taking work (fewer than the pool's threads under a CPU limit) |
/// | `spindle_cpu_throttled_periods_total` | counter | periods in which the container used up its quota; the class form only |
/// | `spindle_cpu_throttled_seconds_total` | floating-point counter | time the container's threads were stopped for it; the class form only |
///
/// CPU time per class tells an operator what background work really costs. The timers
/// are kept while a `PoolMetrics` publishes the pool's metrics: every offload is timed
/// (two clock reads, against the microseconds an offload costs anyway), and one
/// `submit` in 256 on each thread, so that the engine's cheapest path stays as cheap.
public final class PoolMetrics: Sendable {
    private let stopped = DispatchSemaphore(value: 0)
    /// Signalled by the publishing thread after its last round.
    private let lastRound = DispatchSemaphore(value: 0)
    private let done = Atomic<Bool>(false)
    private let pools: [(pool: ThreadPool, set: MetricSet)]
    private let process: ProcessMetrics?

    /// Publishes the process-wide pools' metrics — one set per quality-of-service
    /// class, the class pools created if they were not yet — every `interval`.
    public convenience init(every interval: Duration = .seconds(1)) {
        self.init(QoSPools.classes.map { qos in
            let pool = ThreadPool.forQualityOfService(qos)
            return (pool, [("pool", pool.name), ("qos", QoSPools.label(for: qos))])
        }, every: interval, process: ProcessMetrics())
    }

    /// Publishes the metrics of `pools`, keyed by the name each is published under
    /// (its `pool` dimension), every `interval`.
    public convenience init(pools: [String: ThreadPool], every interval: Duration = .seconds(1)) {
        self.init(pools.sorted { $0.key < $1.key }.map { ($0.value, [("pool", $0.key)]) }, every: interval)
    }

    private init(_ pools: [(ThreadPool, [(String, String)])], every interval: Duration,
                 process: ProcessMetrics? = nil) {
        self.pools = pools.map { pool, dimensions in (pool, MetricSet(dimensions)) }
        self.process = process
        for (pool, set) in self.pools { pool.timerSlot.publish(set.timers) }
        let nanos = max(1_000_000, interval.components.seconds * 1_000_000_000 + interval.components.attoseconds / 1_000_000_000)
        Thread.detachNewThread { [self] in
            while !done.load(ordering: .acquiring) {
                publish()
                _ = stopped.wait(timeout: .now() + .nanoseconds(Int(nanos)))
            }
            publish()
            lastRound.signal()
        }
    }

    /// Publishes once more and stops: when it returns, the metrics backend has every
    /// count up to the call, and nothing more is published. Calling it again does
    /// nothing.
    public func stop() {
        guard !done.exchange(true, ordering: .acquiringAndReleasing) else { return }
        for (pool, _) in pools { pool.timerSlot.publish(nil) }
        stopped.signal()
        lastRound.wait()
    }

    deinit { stop() }

    /// One round: every pool's counters, as deltas since the last round, and its gauges.
    private func publish() {
        for (pool, set) in pools { set.publish(pool) }
        process?.publish()
    }
}

/// What belongs to the process rather than to one pool: the promotion counts
/// (``ThreadPool/promotionCounts``), the container's CPU limit and its throttling, with
/// what was published last (counters take deltas). Touched only by the publishing
/// thread.
final class ProcessMetrics: @unchecked Sendable {
    let moved = Counter(label: "spindle_promotions_total", dimensions: [("kind", "moved")])
    let raised = Counter(label: "spindle_promotions_total", dimensions: [("kind", "raised")])
    let refused = Counter(label: "spindle_promotions_total", dimensions: [("kind", "refused")])
    let cpuLimit = Gauge(label: "spindle_cpu_limit")
    let throttledPeriods = Counter(label: "spindle_cpu_throttled_periods_total")
    let throttledSeconds = FloatingPointCounter(label: "spindle_cpu_throttled_seconds_total")
    private var last = ThreadPool.PromotionCounts(moved: 0, raised: 0, refused: 0)
    private var lastThrottling = ThreadPool.CPUThrottling(periods: 0, time: .zero)

    func publish() {
        let now = ThreadPool.promotionCounts
        if now.moved > last.moved { moved.increment(by: Int64(now.moved - last.moved)) }
        if now.raised > last.raised { raised.increment(by: Int64(now.raised - last.raised)) }
        if now.refused > last.refused { refused.increment(by: Int64(now.refused - last.refused)) }
        last = now
        cpuLimit.record(ThreadPool.cpuLimit?.cpus ?? 0)
        if let t = ThreadPool.cpuThrottling {
            // A group re-created under the process restarts its counters: never count back.
            if t.periods > lastThrottling.periods { throttledPeriods.increment(by: Int64(t.periods - lastThrottling.periods)) }
            if t.time > lastThrottling.time {
                let d = (t.time - lastThrottling.time).components
                throttledSeconds.increment(by: Double(d.seconds) + Double(d.attoseconds) / 1e18)
            }
            lastThrottling = t
        }
    }
}

/// One pool's metrics, created once with its dimensions, and what was published last
/// (counters take deltas).
final class MetricSet: @unchecked Sendable {
    // @unchecked: `last` is touched only by the publishing thread.
    let executed, stolen, refused: Counter
    let queued, running, parked, active: Gauge
    let cpu: FloatingPointCounter
    let timers: PoolTimers
    private var last = (executed: UInt64(0), stolen: UInt64(0), refused: UInt64(0), cpu: Duration.zero)

    init(_ dimensions: [(String, String)]) {
        executed = Counter(label: "spindle_tasks_executed_total", dimensions: dimensions)
        stolen = Counter(label: "spindle_tasks_stolen_total", dimensions: dimensions)
        refused = Counter(label: "spindle_tasks_refused_total", dimensions: dimensions)
        queued = Gauge(label: "spindle_tasks_queued", dimensions: dimensions)
        running = Gauge(label: "spindle_workers_running", dimensions: dimensions)
        parked = Gauge(label: "spindle_workers_parked", dimensions: dimensions)
        active = Gauge(label: "spindle_workers_active", dimensions: dimensions)
        cpu = FloatingPointCounter(label: "spindle_cpu_seconds_total", dimensions: dimensions)
        timers = PoolTimers(
            queueDelay: CoreMetrics.Timer(label: "spindle_offload_queue_delay", dimensions: dimensions),
            runTime: CoreMetrics.Timer(label: "spindle_offload_run_time", dimensions: dimensions),
            taskQueueDelay: CoreMetrics.Timer(label: "spindle_task_queue_delay", dimensions: dimensions),
            taskRunTime: CoreMetrics.Timer(label: "spindle_task_run_time", dimensions: dimensions))
    }

    func publish(_ pool: ThreadPool) {
        let stats = pool.stats
        let executed = stats.reduce(0) { $0 + $1.executed }
        let stolen = stats.reduce(0) { $0 + $1.stolen }
        let refused = pool.refusals.load(ordering: .relaxed)
        let cpu = stats.reduce(Duration.zero) { $0 + $1.cpuTime }
        // Spare slots are reused, so a slot's counters may restart: never count back.
        if executed > last.executed { self.executed.increment(by: Int64(executed - last.executed)) }
        if stolen > last.stolen { self.stolen.increment(by: Int64(stolen - last.stolen)) }
        if refused > last.refused { self.refused.increment(by: Int64(refused - last.refused)) }
        if cpu > last.cpu {
            let d = (cpu - last.cpu).components
            self.cpu.increment(by: Double(d.seconds) + Double(d.attoseconds) / 1e18)
        }
        last = (max(executed, last.executed), max(stolen, last.stolen), max(refused, last.refused), max(cpu, last.cpu))
        let parkedNow = unsafe Int(spindle_pool_parked(pool.raw))
        unsafe queued.record(Int64(spindle_pool_queued(pool.raw)))
        parked.record(Int64(parkedNow))
        active.record(Int64(pool.activeWorkerCount))
        // Spare slots stay in `stats` once made, vacant or not: count the live ones.
        // Workers above the active limit sleep outside the parked count (retired).
        running.record(Int64(max(0, pool.activeWorkerCount + pool.spareWorkerCount - parkedNow)))
    }
}

/// A pool's timers, while a ``PoolMetrics`` publishes them: every offload's, and the
/// sampled submissions'.
final class PoolTimers: Sendable {
    let queueDelay: CoreMetrics.Timer
    let runTime: CoreMetrics.Timer
    let taskQueueDelay: CoreMetrics.Timer
    let taskRunTime: CoreMetrics.Timer
    init(queueDelay: CoreMetrics.Timer, runTime: CoreMetrics.Timer,
         taskQueueDelay: CoreMetrics.Timer, taskRunTime: CoreMetrics.Timer) {
        self.queueDelay = queueDelay
        self.runTime = runTime
        self.taskQueueDelay = taskQueueDelay
        self.taskRunTime = taskRunTime
    }
}

extension ThreadPool {
    /// One `submit` in this many (a power of two), on each thread, is timed while the
    /// pool's metrics are published.
    static let submitSamplingPeriod = 256

    /// The timers to time this submission with, when it is a sampled one of a timed
    /// pool: one relaxed-acquire load, and a per-thread count when the pool is timed.
    @inline(__always)
    var submissionTimers: PoolTimers? {
        guard let timers = timerSlot.current, spindle_sample_due(UInt32(ThreadPool.submitSamplingPeriod)) else {
            return nil
        }
        return timers
    }
}

/// `work`, timed into `timers`' task timers from now: the submission's queueing delay
/// and the closure's run time.
func timed(_ work: @escaping @Sendable () -> Void, _ timers: PoolTimers) -> @Sendable () -> Void {
    let madeAt = DispatchTime.now().uptimeNanoseconds
    return {
        let started = DispatchTime.now().uptimeNanoseconds
        work()
        let ended = DispatchTime.now().uptimeNanoseconds
        timers.taskQueueDelay.recordNanoseconds(Int64(started &- madeAt))
        timers.taskRunTime.recordNanoseconds(Int64(ended &- started))
    }
}

/// Where an offload or a submission finds its pool's timers: an atomic word holding a
/// retained `PoolTimers` (0: not timed). Read on every offload and every `submit`, so
/// one relaxed-acquire load and no lock. A replaced box is never released: a closure
/// may still be recording into it, and a program publishes a pool's metrics a handful
/// of times at most.
final class PoolTimerSlot: Sendable {
    private let word = Atomic<UInt>(0)

    func publish(_ timers: PoolTimers?) {
        // safety: the slot keeps a retained reference for the rest of the process (timers
        // are never released), so `current` may hand them out unretained.
        let bits = timers.map { unsafe UInt(bitPattern: Unmanaged.passRetained($0).toOpaque()) } ?? 0
        word.store(bits, ordering: .releasing)
    }

    /// The timers, if the pool is being timed. Unretained: they are never released.
    @inline(__always)
    var current: PoolTimers? {
        let bits = word.load(ordering: .acquiring)
        // safety: `bits` is a reference `publish` retained and never releases.
        return unsafe bits == 0 ? nil : Unmanaged<PoolTimers>.fromOpaque(UnsafeRawPointer(bitPattern: bits).unsafelyUnwrapped)
            .takeUnretainedValue()
    }
}
