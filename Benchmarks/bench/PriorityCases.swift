import Dispatch
import Foundation
import Spindle
import Synchronization

// `priority-inversion`: userInteractive work that waits for background work, while
// default-class work keeps every CPU busy. Foundation's and Spindle's operation types
// side by side, as in OperationCases.swift.

/// Burns `ns` of the calling thread's own CPU time: the same work whatever share of a
/// CPU the thread gets, so a starved thread takes longer and a promoted one does not.
func burnThreadCPU(_ ns: UInt64) {
    var ts = timespec()
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts)
    let end = UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec) + ns
    var x: UInt64 = 1
    while true {
        for _ in 0..<1000 { x = x &* 6364136223846793005 &+ 1 }
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts)
        if UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec) >= end { break }
    }
    if x == 42 { print("") } // keep the loop
}

/// Default-class work on every CPU: `lanes` chunks of 1 ms that resubmit themselves
/// until stopped, on Spindle's default pool or on Dispatch's default queue.
final class DefaultLoad: @unchecked Sendable {
    let stop = Atomic<Bool>(false)
    let running = Atomic<Int>(0)

    init(lanes: Int, onSpindle: Bool) {
        for _ in 0..<lanes {
            running.add(1, ordering: .relaxed)
            if onSpindle {
                @Sendable func chunk() {
                    burnThreadCPU(1_000_000)
                    if stop.load(ordering: .acquiring) { running.subtract(1, ordering: .relaxed); return }
                    try? ThreadPool.shared.submit(chunk)
                }
                try? ThreadPool.shared.submit(chunk)
            } else {
                @Sendable func chunk() {
                    burnThreadCPU(1_000_000)
                    if stop.load(ordering: .acquiring) { running.subtract(1, ordering: .relaxed); return }
                    DispatchQueue.global(qos: .default).async(execute: chunk)
                }
                DispatchQueue.global(qos: .default).async(execute: chunk)
            }
        }
        usleep(50_000) // let the load take the CPUs
    }

    func end() throws {
        stop.store(true, ordering: .releasing)
        let deadline = now() + 30_000_000_000
        while running.load(ordering: .relaxed) > 0 {
            if now() > deadline { throw BenchFailure("priority-inversion: the default-class load did not stop") }
            usleep(1000)
        }
    }
}

/// One sample: from adding the background work until the userInteractive work that
/// waits for it has finished, in ns. `dependency`: a userInteractive operation depends
/// on it; otherwise a userInteractive thread waits for it.
private func inversionSample(_ system: String, dependency: Bool, work: UInt64) throws -> UInt64 {
    let finishedAt = Atomic<UInt64>(0)
    let done = DispatchSemaphore(value: 0)
    let uiThread = DispatchQueue.global(qos: .userInteractive)
    let t0 = now()
    switch system {
    case "spindle", "floor":
        let low = Spindle.OperationQueue()
        low.qualityOfService = system == "floor" ? .userInteractive : .background
        let high = Spindle.OperationQueue()
        high.qualityOfService = .userInteractive
        let b = Spindle.BlockOperation { burnThreadCPU(work) }
        if dependency {
            let u = Spindle.BlockOperation { finishedAt.store(now(), ordering: .relaxed); done.signal() }
            u.addDependency(b)
            low.addOperation(b)
            high.addOperation(u)
        } else {
            low.addOperation(b)
            try ThreadPool.forQualityOfService(.userInteractive).submit {
                b.waitUntilFinished()
                finishedAt.store(now(), ordering: .relaxed)
                done.signal()
            }
        }
    case "foundation":
        let low = Foundation.OperationQueue()
        low.qualityOfService = .background
        let high = Foundation.OperationQueue()
        high.qualityOfService = .userInteractive
        let b = Foundation.BlockOperation { burnThreadCPU(work) }
        if dependency {
            let u = Foundation.BlockOperation { finishedAt.store(now(), ordering: .relaxed); done.signal() }
            u.addDependency(b)
            low.addOperation(b)
            high.addOperation(u)
        } else {
            low.addOperation(b)
            let box = UncheckedBox(b)
            uiThread.async {
                box.value.waitUntilFinished()
                finishedAt.store(now(), ordering: .relaxed)
                done.signal()
            }
        }
    default: // dispatch: a background block in a group, and a userInteractive block after it
        let group = DispatchGroup()
        DispatchQueue.global(qos: .background).async(group: group) { burnThreadCPU(work) }
        if dependency {
            group.notify(qos: .userInteractive, queue: uiThread) { finishedAt.store(now(), ordering: .relaxed); done.signal() }
        } else {
            uiThread.async {
                group.wait()
                finishedAt.store(now(), ordering: .relaxed)
                done.signal()
            }
        }
    }
    guard done.wait(timeout: .now() + 120) == .success else {
        throw BenchFailure("priority-inversion: \(system)'s userInteractive work did not finish in 120 s")
    }
    return finishedAt.load(ordering: .relaxed) - t0
}

/// A reference that crosses to another thread; the operation types are thread-safe.
private struct UncheckedBox<T>: @unchecked Sendable {
    let value: T
    init(_ v: T) { value = v }
}

/// Both variants, each as a case of its own: Spindle (userInteractive waiting on
/// background), Foundation's OperationQueue and Dispatch the same, and the floor:
/// Spindle with both at userInteractive, under the same load, in the same run.
func priorityInversionCases(samples: Int, reps: Int, cpus: Int, workMicros: Int) throws -> [CaseResult] {
    let systems = ["spindle", "floor", "foundation", "dispatch"].filter { systemFilter == nil || systemFilter!.contains($0) || $0 == "floor" }
    let work = UInt64(workMicros) * 1000
    // Warm-up, without the load: the class pools are made on first use, and starting
    // their threads under a full load would be measured as the first sample.
    for system in systems {
        for dependency in [true, false] { _ = try inversionSample(system, dependency: dependency, work: work) }
    }
    var out: [CaseResult] = []
    for dependency in [true, false] {
        let name = dependency ? "priority-inversion" : "priority-inversion-wait"
        var recs = [String: LatencyRecorder]()
        var p99s = [String: [Double]]()
        for s in systems { recs[s] = LatencyRecorder(); p99s[s] = [] }
        for r in 0..<reps {
            for system in r % 2 == 0 ? systems : systems.reversed() {
                let load = DefaultLoad(lanes: cpus * 4, onSpindle: system == "spindle" || system == "floor")
                var rec = LatencyRecorder()
                do {
                    for _ in 0..<samples { rec.record(try inversionSample(system, dependency: dependency, work: work)) }
                } catch {
                    try? load.end()
                    throw error
                }
                try load.end()
                p99s[system]!.append(Double(rec.histogram.valueAtPercentile(99)))
                recs[system]!.histogram.add(rec.histogram)
            }
            progress("[\(name)] rep \(r + 1)/\(reps): p99 " + systems.map { "\($0) \(fmt(p99s[$0]!.last!)) ns" }.joined(separator: ", "))
        }
        let pairs = [("spindle", "floor"), ("spindle", "foundation"), ("spindle", "dispatch")].filter { systems.contains($0.0) && systems.contains($0.1) }
        let what = dependency ? "a userInteractive operation that depends on a background one"
                              : "a userInteractive thread that waits for a background operation (Dispatch: for a background block's group)"
        out.append(CaseResult(
            name: name, tasks: samples, reps: reps, metric: .latency,
            systems: systems.map { SystemResult(system: $0, tasks: samples, samples: p99s[$0]!, percentiles: recs[$0]!.percentiles()) },
            ratios: pairs.map { medianRatio($0.0, $0.1, in: p99s) },
            note: "from adding the work until \(what) has finished; the background work is \(workMicros) µs of CPU; "
                + "\(cpus * 4) lanes of default-class work keep every CPU busy (each system's own default class); "
                + "floor: Spindle with both at userInteractive; ratios are of per-repetition p99s; "
                + "promotions in this process: \(ThreadPool.promotionCounts)"))
    }
    return out
}
