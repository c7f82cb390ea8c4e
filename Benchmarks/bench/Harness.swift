import BenchSupport
import Foundation

/// One measured system within a case: returns nanoseconds for `tasks` units of work,
/// and throws if the work it was asked to do was not all done.
struct SystemRun {
    let name: String
    /// Work units per repetition when this system runs a different amount than the
    /// case's default (Foundation's dependency chain cannot survive Spindle's size).
    var tasks: Int? = nil
    let run: () throws -> Double

    init(name: String, tasks: Int? = nil, run: @escaping () throws -> Double) {
        self.name = name
        self.tasks = tasks
        self.run = run
    }
}

/// What a case reports per system.
enum Metric: Equatable {
    case nsPerTask
    case latency
    case cpuMsPerSecond
}

struct SystemResult {
    let system: String
    var tasks: Int = 0
    /// Per repetition: ns per task (nsPerTask), ms of CPU per second (cpuMsPerSecond).
    var samples: [Double]
    /// Latency cases: the merged histogram's percentiles, in ns.
    var percentiles: [String: Double] = [:]
}

struct Ratio {
    let system: String
    let vs: String
    let median: Double
}

struct CaseResult {
    let name: String
    let tasks: Int
    let reps: Int
    let metric: Metric
    var systems: [SystemResult]
    var ratios: [Ratio]
    var note: String? = nil
}

struct BenchFailure: Error, CustomStringConvertible {
    let description: String
    init(_ d: String) { description = d }
}

func median(_ xs: [Double]) -> Double {
    precondition(!xs.isEmpty)
    let s = xs.sorted()
    return s.count % 2 == 1 ? s[s.count / 2] : (s[s.count / 2 - 1] + s[s.count / 2]) / 2
}

/// `a` against `b` as every case reports it: the median of the per-repetition ratios of
/// their figures in `perRep` (repetition i of `a` over repetition i of `b`, which ran
/// side by side), so that drift between repetitions cancels.
func medianRatio(_ a: String, _ b: String, in perRep: [String: [Double]]) -> Ratio {
    Ratio(system: a, vs: b, median: median(zip(perRep[a]!, perRep[b]!).map { $0 / $1 }))
}

func percentile(_ sorted: [Double], _ p: Double) -> Double {
    precondition(!sorted.isEmpty)
    let rank = min(sorted.count - 1, max(0, Int((p / 100 * Double(sorted.count)).rounded(.up)) - 1))
    return sorted[rank]
}

func now() -> UInt64 { DispatchTime.now().uptimeNanoseconds }

/// Set by scripts/instructions.sh (SPINDLE_BENCH_INSTRUCTIONS=1): each timed region is
/// marked for callgrind under "case/system/tasks" (BenchSupport/instructions.c).
let countingInstructions = ProcessInfo.processInfo.environment["SPINDLE_BENCH_INSTRUCTIONS"] == "1"
/// The case and system whose region runs next, for the label.
nonisolated(unsafe) var instructionLabel = ""

/// Runs `body` once; returns how long it took, in nanoseconds, and what it returned.
func timed<T>(_ body: () throws -> T) rethrows -> (ns: Double, value: T) {
    if countingInstructions { bench_instructions_begin() }
    let t0 = now()
    let v = try body()
    let t1 = now()
    if countingInstructions { bench_instructions_end(instructionLabel) }
    return (Double(t1 - t0), v)
}

func progress(_ s: String) {
    FileHandle.standardError.write(Data((s + "\n").utf8))
}

/// Lets the threads of the system that ran last go idle, and merges the heap it left,
/// before the next one starts.
///
/// Threads: Dispatch and the Swift concurrency runtime keep worker threads busy for a
/// while after a burst; on a two-CPU machine one such thread takes half of the next
/// system's cores, and the next system's figure would depend on which ran before it.
/// 200 ms is long enough for them to park.
///
/// Heap: glibc parks small freed chunks in its fast bins and merges them only when a
/// later large request (or a large free) needs it, then all at once, in whichever
/// thread asked (`malloc_consolidate`). Foundation's queue frees ~10^5 operations per
/// repetition of `operation-throughput`, and without this the next system to allocate
/// a large block would pay milliseconds for merging them, inside its timed region.
/// Each system starts from a merged heap instead, as it would in a process of its own.
/// The same pause and merge for every system, outside the timed region.
func settle() {
    bench_consolidate_heap()
    usleep(200_000)
}

/// Runs every system once to warm up, then `reps` repetitions in alternation (A B, then
/// B A, ...), so that drift of a shared, noisy machine hits every system alike; ratios
/// are taken per repetition against `reference` and their median reported.
/// `alsoVs`: further ratios, each of one system against another.
/// Systems selected with --systems (nil: all). The reference runs too, unless --alone
/// says not to (`runReference`); then no ratio is taken against it.
nonisolated(unsafe) var systemFilter: Set<String>?
/// Whether `measure` runs each case's reference beside the selected systems.
nonisolated(unsafe) var runReference = true

/// Whether a case runs `system`: selected with --systems, or the case's `reference`,
/// which runs beside them unless --alone said not to.
func runs(_ system: String, reference: String) -> Bool {
    systemFilter == nil || systemFilter!.contains(system) || (system == reference && runReference)
}

func measure(_ name: String, tasks: Int, reps: Int, reference: String, alsoVs: [(String, String)] = [],
             _ allSystems: [SystemRun]) throws -> CaseResult {
    let systems = allSystems.filter { runs($0.name, reference: reference) }
    progress("[\(name)] warm-up")
    for s in systems {
        instructionLabel = "warm-up"
        _ = try s.run()
    }
    var samples = [String: [Double]]()
    for r in 0..<reps {
        let order = r % 2 == 0 ? systems : systems.reversed()
        for s in order {
            settle()
            instructionLabel = "\(name)/\(s.name)/\(s.tasks ?? tasks)"
            let ns = try s.run()
            samples[s.name, default: []].append(ns / Double(s.tasks ?? tasks))
        }
        progress("[\(name)] rep \(r + 1)/\(reps): " + systems.map {
            "\($0.name) \(String(format: "%.1f", samples[$0.name]!.last!)) ns"
        }.joined(separator: ", "))
    }
    var ratios = samples[reference] == nil ? []
        : systems.filter { $0.name != reference }.map { medianRatio($0.name, reference, in: samples) }
    for (a, b) in alsoVs where samples[a] != nil && samples[b] != nil { ratios.append(medianRatio(a, b, in: samples)) }
    return CaseResult(name: name, tasks: tasks, reps: reps, metric: .nsPerTask,
                      systems: systems.map { SystemResult(system: $0.name, tasks: $0.tasks ?? tasks, samples: samples[$0.name]!) },
                      ratios: ratios)
}
