import BenchSupport
import Dispatch
import Foundation
import Histogram
import Spindle
import Synchronization

/// Records submit→start latencies of one system into an HdrHistogram.
struct LatencyRecorder {
    var histogram = Histogram<UInt64>(highestTrackableValue: 60_000_000_000, numberOfSignificantValueDigits: .three)
    mutating func record(_ ns: UInt64) { _ = histogram.record(max(ns, 1)) }
    func percentiles() -> [String: Double] {
        ["p50": Double(histogram.valueAtPercentile(50)), "p99": Double(histogram.valueAtPercentile(99)),
         "p999": Double(histogram.valueAtPercentile(99.9))]
    }
}

/// Submits one task from this (outside) thread, after `gapMicros` in which the workers
/// go idle (past their spin), and returns how long it took to start.
private func sampleOnce(gapMicros: UInt32, submit: (@escaping @Sendable () -> Void) throws -> Void) throws -> UInt64 {
    let startedAt = Atomic<UInt64>(0)
    let done = DispatchSemaphore(value: 0)
    usleep(gapMicros)
    let t0 = now()
    try submit {
        startedAt.store(now(), ordering: .releasing)
        done.signal()
    }
    guard done.wait(timeout: .now() + 10) == .success else { throw BenchFailure("latency: a task never started") }
    return startedAt.load(ordering: .acquiring) &- t0
}

/// Submits one task at a time, `samples` of them, and returns their median start latency.
private func sampleLatency(_ samples: Int, gapMicros: UInt32, into rec: inout LatencyRecorder,
                           submit: (@escaping @Sendable () -> Void) throws -> Void) throws -> Double {
    var values: [Double] = []
    values.reserveCapacity(samples)
    for _ in 0..<samples {
        let d = try sampleOnce(gapMicros: gapMicros, submit: submit)
        rec.record(d)
        values.append(Double(d))
    }
    return median(values)
}

/// Submits one task to each system in turn, `samples` rounds, and returns each system's
/// median. The systems take turns sample by sample, each round starting with the next
/// one, rather than repetition by repetition: a shared machine's phases can last
/// seconds and move an idle hand-off for every system alike (docs/performance.md,
/// "Latency"), so samples taken side by side cancel them, where whole repetitions run
/// one after another can fall into different phases.
private func sampleLatencyInTurn(_ samples: Int, gapMicros: UInt32,
                                 systems: [(name: String, submit: (@escaping @Sendable () -> Void) throws -> Void)],
                                 into recs: inout [String: LatencyRecorder]) throws -> [String: Double] {
    var values = [String: [Double]]()
    for round in 0..<samples {
        for k in 0..<systems.count {
            let s = systems[(round + k) % systems.count]
            let d = try sampleOnce(gapMicros: gapMicros, submit: s.submit)
            recs[s.name, default: LatencyRecorder()].record(d)
            values[s.name, default: []].append(Double(d))
        }
    }
    return values.mapValues(median)
}

/// The pool idle, one task at a time from an outside thread: submit→start latency.
func latencyCase(pool: ThreadPool, nio: NIOPeer, samples: Int, reps: Int) throws -> CaseResult {
    let systems: [(name: String, submit: (@escaping @Sendable () -> Void) throws -> Void)] = [
        ("spindle", { try pool.submit($0) }),
        ("dispatch", { DispatchQueue.global().async(execute: $0) }),
        ("nio", { work in nio.pool.submit { _ in work() } }),
    ].filter { runs($0.0, reference: "dispatch") }
    var recs = [String: LatencyRecorder]()
    var p50s = [String: [Double]]()
    progress("[latency] warm-up")
    var warm = [String: LatencyRecorder]()
    _ = try sampleLatencyInTurn(50, gapMicros: 200, systems: systems, into: &warm)
    for s in systems { recs[s.name] = LatencyRecorder(); p50s[s.name] = [] }
    for r in 0..<reps {
        settle()
        let medians = try sampleLatencyInTurn(samples, gapMicros: 300, systems: systems, into: &recs)
        for s in systems { p50s[s.name]!.append(medians[s.name]!) }
        progress("[latency] rep \(r + 1)/\(reps): p50 " + systems.map { "\($0.name) \(fmt(p50s[$0.name]!.last!)) ns" }.joined(separator: ", "))
    }
    var ratios = p50s["dispatch"] == nil ? []
        : systems.filter { $0.name != "dispatch" }.map { medianRatio($0.name, "dispatch", in: p50s) }
    if p50s["nio"] != nil && p50s["spindle"] != nil { ratios.append(medianRatio("spindle", "nio", in: p50s)) }
    return CaseResult(
        name: "latency", tasks: samples, reps: reps, metric: .latency,
        systems: systems.map { SystemResult(system: $0.name, tasks: samples, samples: p50s[$0.name]!, percentiles: recs[$0.name]!.percentiles()) },
        ratios: ratios,
        note: "the systems take turns sample by sample; p50 ratio is the median of per-repetition p50 ratios; percentiles are over all repetitions")
}

/// The bare futex hand-off (Benchmarks/BenchSupport/handoff.c): one parked thread per
/// CPU, pinned, at the given nice and slice; a submission wakes the one on the
/// submitter's CPU. What starting a task on a parked thread costs at least.
final class HandoffFloor {
    private let raw: OpaquePointer

    private final class Body {
        let run: @Sendable () -> Void
        init(_ run: @escaping @Sendable () -> Void) { self.run = run }
    }

    init(nice: Int32, sliceNanoseconds: UInt32) throws {
        var niceError: Int32 = 0, sliceError: Int32 = 0
        guard let raw = bench_handoff_create(nice, sliceNanoseconds, &niceError, &sliceError) else {
            throw BenchFailure("handoff-floor: could not start its threads (errno \(errno))")
        }
        self.raw = raw
        // Asked for what Spindle's workers got, so a refusal means the comparison is off.
        if niceError != 0 || sliceError != 0 {
            bench_handoff_destroy(raw)
            throw BenchFailure("handoff-floor: nice \(nice) or slice refused (errno \(niceError), \(sliceError))")
        }
    }

    func submit(_ body: @escaping @Sendable () -> Void) {
        bench_handoff_submit(raw, { ctx in
            Unmanaged<Body>.fromOpaque(ctx!).takeRetainedValue().run()
        }, Unmanaged.passRetained(Body(body)).toOpaque())
    }

    deinit { bench_handoff_destroy(raw) }
}

/// Background work saturating every CPU; userInteractive tasks submitted one at a time;
/// their submit→start latency. Spindle: a background worker set at nice +10 and a
/// userInteractive one at nice −4 (0 when the process may not lower its nice).
/// Dispatch: `global(qos: .background)` and `global(qos: .userInteractive)`.
///
/// A third system, `handoff-floor`, runs each task on a bare parked thread instead
/// (`HandoffFloor`), under the same background load as Spindle's, at the nice Spindle's
/// userInteractive workers got and with their scheduler slice. It is not a competitor:
/// it is the least that any pool which parks its idle threads pays to start a task, in
/// the same run, so the table shows how far Spindle is from it and what the case's
/// target (Spindle's p99 at most 0.2× Dispatch's) asks of anything that parks.
func qosUnderLoadCase(samples: Int, reps: Int, cpus: Int) throws -> CaseResult {
    let background = ThreadPool.forQualityOfService(.background)
    let interactive = ThreadPool.forQualityOfService(.userInteractive)
    // What Spindle's interactive workers got: their nice, and their slice unless the
    // kernel refused it (0: the kernel's).
    let slice = interactive.timeSliceError == nil ? interactive.requestedTimeSlice : nil
    let floor = try HandoffFloor(nice: interactive.effectiveNice,
                                 sliceNanoseconds: slice.map { UInt32($0 / .nanoseconds(1)) } ?? 0)
    let systems = ["spindle", "dispatch", "handoff-floor"]
    var recs = [String: LatencyRecorder]()
    var p99s = [String: [Double]]()
    for s in systems { recs[s] = LatencyRecorder(); p99s[s] = [] }

    /// Keeps `lanes` chunks of ~1 ms of busy work in flight until `stop` is set; each
    /// chunk resubmits itself, so the load never drains and never piles up.
    final class Load: @unchecked Sendable {
        let stop = Atomic<Bool>(false)
        let running = Atomic<Int>(0)
        let chunks = Atomic<Int>(0)
        func spin() {
            let end = now() + 1_000_000
            var x: UInt64 = 1
            while now() < end { x = x &* 6364136223846793005 &+ 1 }
            if x == 42 { print("") } // keep the loop
            chunks.add(1, ordering: .relaxed)
        }
    }
    /// Dispatch's background queue for Dispatch; Spindle's background pool otherwise.
    func saturate(_ name: String) -> Load {
        let load = Load()
        let lanes = cpus * 2
        for _ in 0..<lanes {
            load.running.add(1, ordering: .relaxed)
            if name != "dispatch" {
                @Sendable func chunk() {
                    load.spin()
                    if load.stop.load(ordering: .acquiring) { load.running.subtract(1, ordering: .relaxed); return }
                    try? background.submit(chunk)
                }
                try? background.submit(chunk)
            } else {
                @Sendable func chunk() {
                    load.spin()
                    if load.stop.load(ordering: .acquiring) { load.running.subtract(1, ordering: .relaxed); return }
                    DispatchQueue.global(qos: .background).async(execute: chunk)
                }
                DispatchQueue.global(qos: .background).async(execute: chunk)
            }
        }
        usleep(50_000) // let the load build up
        return load
    }
    func drain(_ load: Load) throws {
        load.stop.store(true, ordering: .releasing)
        let deadline = now() + 10_000_000_000
        while load.running.load(ordering: .relaxed) > 0 {
            if now() > deadline { throw BenchFailure("qos-under-load: the background load did not stop") }
            usleep(1000)
        }
        guard load.chunks.load(ordering: .relaxed) > 0 else { throw BenchFailure("qos-under-load: no background work ran") }
    }

    for r in 0..<reps {
        for name in r % 2 == 0 ? systems : systems.reversed() {
            let load = saturate(name)
            var rec = LatencyRecorder()
            switch name {
            case "spindle":
                _ = try sampleLatency(samples, gapMicros: 2000, into: &rec) { try interactive.submit($0) }
            case "dispatch":
                _ = try sampleLatency(samples, gapMicros: 2000, into: &rec) { DispatchQueue.global(qos: .userInteractive).async(execute: $0) }
            default:
                _ = try sampleLatency(samples, gapMicros: 2000, into: &rec) { floor.submit($0) }
            }
            try drain(load)
            p99s[name]!.append(Double(rec.histogram.valueAtPercentile(99)))
            recs[name]!.histogram.add(rec.histogram)
        }
        progress("[qos-under-load] rep \(r + 1)/\(reps): p99 " + systems.map { "\($0) \(fmt(p99s[$0]!.last!)) ns" }.joined(separator: ", "))
    }
    let nice = interactive.niceError == nil ? "\(interactive.effectiveNice)" : "\(interactive.effectiveNice) (negative nice refused: errno \(interactive.niceError!))"
    return CaseResult(
        name: "qos-under-load", tasks: samples, reps: reps, metric: .latency,
        systems: systems.map { SystemResult(system: $0, tasks: samples, samples: p99s[$0]!, percentiles: recs[$0]!.percentiles()) },
        ratios: [("spindle", "dispatch"), ("handoff-floor", "dispatch"), ("spindle", "handoff-floor")].map { medianRatio($0, $1, in: p99s) },
        note: "userInteractive start latency under \(cpus * 2) lanes of background load; the ratio is of p99s; spindle userInteractive workers at nice \(nice), background at \(background.effectiveNice); handoff-floor: a bare futex wake of a parked thread pinned to the submitter's CPU, at the same nice and slice, under Spindle's background load")
}

/// CPU consumed while idle, after a warm-up, over the same intervals: Spindle's pools
/// (their threads' own CPU clocks) against everything else in the process (Dispatch's
/// threads; the main thread sleeps).
func idleCPUCase(pools: [ThreadPool], seconds: Double, reps: Int) throws -> CaseResult {
    progress("[idle-cpu] warm-up")
    for p in pools { for _ in 0..<1000 { try p.submit {} } }
    let g = DispatchGroup()
    for _ in 0..<1000 { DispatchQueue.global().async(group: g) {} }
    g.wait()
    usleep(200_000)
    var spindle: [Double] = [], dispatch: [Double] = []
    for r in 0..<reps {
        let s0 = pools.reduce(Duration.zero) { $0 + $1.cpuTime }
        let p0 = processCPU()
        usleep(UInt32(seconds * 1_000_000))
        let s1 = pools.reduce(Duration.zero) { $0 + $1.cpuTime }
        let p1 = processCPU()
        let sMs = Double((s1 - s0).components.attoseconds) / 1e15 + Double((s1 - s0).components.seconds) * 1000
        let pMs = (p1 - p0) * 1000
        spindle.append(sMs / seconds)
        dispatch.append(max(0, pMs - sMs) / seconds)
        progress("[idle-cpu] rep \(r + 1)/\(reps): spindle \(fmt(spindle.last!)) ms/s, rest of process \(fmt(dispatch.last!)) ms/s")
    }
    return CaseResult(name: "idle-cpu", tasks: 0, reps: reps, metric: .cpuMsPerSecond,
                      systems: [SystemResult(system: "spindle", samples: spindle), SystemResult(system: "dispatch", samples: dispatch)],
                      ratios: [],
                      note: "CPU ms per idle second over \(seconds) s intervals; 'dispatch' is the rest of the process (Dispatch's idle threads)")
}

/// User + system CPU time of the whole process, in seconds.
func processCPU() -> Double {
    var u = rusage()
    getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &u)
    return Double(u.ru_utime.tv_sec) + Double(u.ru_utime.tv_usec) / 1e6 + Double(u.ru_stime.tv_sec) + Double(u.ru_stime.tv_usec) / 1e6
}
