import CSpindle
import Dispatch
import Foundation
import Spindle
import Synchronization

// `quota`: a service in a container with a CPU limit. A child of this process runs in a
// cgroup v1 `cpu` group with a quota of one CPU: heavy default-class work keeps its
// pool busy, and a light userInteractive task is due every 10 ms. Once with the pools
// sized by the quota (Spindle's default), once sized by the CPU count, as a pool that
// ignores the quota would be (SPINDLE_WORKERS set to it).

/// What one child run measured.
struct QuotaRun {
    var lightDelays: [Double] // ns from each light task's due time to its start
    var chunksPerSecond: Double
    var throttledPeriods: UInt64
    var throttledMs: Double
}

/// The child's side: `bench quota-child SECONDS`. Prints one line the parent parses.
func quotaChild(seconds: Double) throws {
    let heavy = ThreadPool.shared
    let light = ThreadPool.forQualityOfService(.userInteractive)
    let stop = Atomic<Bool>(false)
    let chunks = Atomic<Int>(0)
    let running = Atomic<Int>(0)
    let lanes = 2 * Int(usableCPUs())
    @Sendable func chunk() {
        burnThreadCPU(1_000_000)
        chunks.add(1, ordering: .relaxed)
        if stop.load(ordering: .acquiring) { running.subtract(1, ordering: .relaxed); return }
        try? heavy.submit(chunk)
    }
    for _ in 0..<lanes {
        running.add(1, ordering: .relaxed)
        try heavy.submit(chunk)
    }
    usleep(200_000) // let the load and the throttling settle
    let before = ThreadPool.cpuThrottling
    let startChunks = chunks.load(ordering: .relaxed)
    let start = now()
    final class Delays: @unchecked Sendable { // under `lock`
        let lock = NSLock()
        var values: [Double] = []
        func add(_ d: Double) { lock.lock(); values.append(d); lock.unlock() }
        var all: [Double] { lock.lock(); defer { lock.unlock() }; return values }
    }
    let delays = Delays()
    let period: UInt64 = 10_000_000
    var due = start + period
    while now() < start + UInt64(seconds * 1e9) {
        let wait = Int64(due) - Int64(now())
        if wait > 0 { usleep(UInt32(wait / 1000)) }
        let dueAt = due
        try light.submit { delays.add(Double(now() - dueAt)) }
        due += period
    }
    let elapsed = Double(now() - start) / 1e9
    let done = chunks.load(ordering: .relaxed) - startChunks
    let after = ThreadPool.cpuThrottling
    stop.store(true, ordering: .releasing)
    while running.load(ordering: .relaxed) > 0 { usleep(1000) }
    let d = delays.all
    let periods = (after?.periods ?? 0) &- (before?.periods ?? 0)
    let throttled = (after?.time ?? .zero) - (before?.time ?? .zero)
    let ms = Double(throttled.components.seconds) * 1e3 + Double(throttled.components.attoseconds) / 1e15
    print("QUOTA-RESULT active=\(heavy.activeWorkerCount) chunks_per_s=\(Double(done) / elapsed) "
          + "throttled_periods=\(periods) throttled_ms=\(ms) delays=\(d.map { String(Int($0)) }.joined(separator: ","))")
}

/// The CPUs the process may use (its affinity, not the machine's online count): what a
/// quota-unaware pool is sized by.
func usableCPUs() -> UInt32 { spindle_usable_cpu_count() }

private func runQuotaChild(group: String, aware: Bool, seconds: Double) throws -> QuotaRun {
    let me = CommandLine.arguments[0]
    let p = Process()
    p.executableURL = URL(fileURLWithPath: "/bin/sh")
    p.arguments = ["-c", "echo $$ > \"$0\"/cgroup.procs && exec \"$1\" quota-child --seconds \"$2\"", group, me, "\(seconds)"]
    var env = ProcessInfo.processInfo.environment
    env["SPINDLE_WORKERS"] = aware ? nil : "\(usableCPUs())"
    p.environment = env
    let out = Pipe()
    p.standardOutput = out
    try p.run()
    let text = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    p.waitUntilExit()
    guard p.terminationStatus == 0, let line = text.split(separator: "\n").first(where: { $0.hasPrefix("QUOTA-RESULT") }) else {
        throw BenchFailure("quota: the child failed (\(p.terminationStatus)): \(text)")
    }
    var fields: [String: String] = [:]
    for f in line.split(separator: " ").dropFirst() {
        let kv = f.split(separator: "=", maxSplits: 1)
        if kv.count == 2 { fields[String(kv[0])] = String(kv[1]) }
    }
    let delays = (fields["delays"] ?? "").split(separator: ",").compactMap { Double($0) }
    guard !delays.isEmpty, let cps = Double(fields["chunks_per_s"] ?? "") else { throw BenchFailure("quota: unreadable child output: \(line)") }
    return QuotaRun(lightDelays: delays, chunksPerSecond: cps,
                    throttledPeriods: UInt64(fields["throttled_periods"] ?? "") ?? 0,
                    throttledMs: Double(fields["throttled_ms"] ?? "") ?? 0)
}

/// The case: `quota` (the light task's delay; ratio of p99s) and `quota-throughput` (ns
/// of wall time per 1 ms chunk of heavy work; ratio of medians). Empty, with a note on
/// standard error, where the machine gives no cgroup v1 cpu controller to use.
func quotaCases(reps: Int, seconds: Double) throws -> [CaseResult] {
    let controller = "/sys/fs/cgroup/cpu"
    guard getuid() == 0, FileManager.default.isWritableFile(atPath: controller + "/cgroup.procs") else {
        progress("[quota] skipped: needs root and the cgroup v1 cpu controller at \(controller)")
        return []
    }
    let group = controller + "/spindle-bench-\(getpid())"
    try? FileManager.default.createDirectory(atPath: group, withIntermediateDirectories: false)
    defer { for _ in 0..<100 where rmdir(group) != 0 { usleep(10_000) } }
    try "100000".write(toFile: group + "/cpu.cfs_period_us", atomically: false, encoding: .utf8)
    try "100000".write(toFile: group + "/cpu.cfs_quota_us", atomically: false, encoding: .utf8) // one CPU
    let systems = ["quota-aware", "cpu-count"]
    var p99s = [String: [Double]](), perChunk = [String: [Double]](), recs = [String: LatencyRecorder]()
    var throttling = [String: (UInt64, Double)]()
    for s in systems { p99s[s] = []; perChunk[s] = []; recs[s] = LatencyRecorder(); throttling[s] = (0, 0) }
    for r in 0..<reps {
        for s in r % 2 == 0 ? systems : systems.reversed() {
            let run = try runQuotaChild(group: group, aware: s == "quota-aware", seconds: seconds)
            var rec = LatencyRecorder()
            for d in run.lightDelays { rec.record(UInt64(max(0, d))) }
            p99s[s]!.append(Double(rec.histogram.valueAtPercentile(99)))
            recs[s]!.histogram.add(rec.histogram)
            perChunk[s]!.append(1e9 / run.chunksPerSecond)
            throttling[s]! = (throttling[s]!.0 + run.throttledPeriods, throttling[s]!.1 + run.throttledMs)
        }
        progress("[quota] rep \(r + 1)/\(reps): light p99 " + systems.map { "\($0) \(fmt(p99s[$0]!.last!)) ns" }.joined(separator: ", "))
    }
    let throttled = systems.map { "\($0) throttled \(throttling[$0]!.0) periods, \(Int(throttling[$0]!.1)) ms" }.joined(separator: "; ")
    let note = "a child in a cgroup v1 group with a quota of one CPU on \(usableCPUs()) CPUs, "
        + "heavy default-class work on every worker and a light userInteractive task due every 10 ms, for \(seconds) s a run; "
        + "quota-aware: Spindle's default sizing; cpu-count: SPINDLE_WORKERS set to the CPU count; \(throttled)"
    return [
        CaseResult(name: "quota", tasks: p99s["quota-aware"]!.count, reps: reps, metric: .latency,
                   systems: systems.map { SystemResult(system: $0, tasks: Int(seconds * 100), samples: p99s[$0]!, percentiles: recs[$0]!.percentiles()) },
                   ratios: [medianRatio("quota-aware", "cpu-count", in: p99s)], note: "light task delay from its due time; " + note),
        CaseResult(name: "quota-throughput", tasks: reps, reps: reps, metric: .nsPerTask,
                   systems: systems.map { SystemResult(system: $0, tasks: 1, samples: perChunk[$0]!) },
                   ratios: [medianRatio("quota-aware", "cpu-count", in: perChunk)],
                   note: "wall time per 1 ms chunk of heavy work (lower is more throughput); " + note),
    ]
}
