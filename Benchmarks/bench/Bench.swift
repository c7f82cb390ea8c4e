import ArgumentParser
import Foundation
import Spindle

@main
struct Bench: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bench",
        abstract: "Measures Spindle against Dispatch, Foundation's OperationQueue, TaskGroup and NIOThreadPool, in one run, as ratios.",
        discussion: """
            Every case runs its systems in alternation (A B, then B A, ...) after a warm-up, \
            and reports the median, min and max per repetition and the median of the \
            per-repetition ratios against the reference system, so that machine drift cancels.
            """)

    enum Format: String, ExpressibleByArgument, CaseIterable { case table, json, markdown }

    static let allCases = ["submit", "contended", "fork-join", "parallel-for", "operation-throughput", "serial-queue",
                           "dependency-chain", "blocking", "latency", "async-offload", "qos-under-load", "priority-inversion", "quota", "idle-cpu"]

    @Argument(help: "'topology' prints the detected topology and the placement plan instead of running the timed cases. ('quota-child' is the quota case's own child process.)")
    var mode: String?

    @Option(help: "quota: seconds each child process runs.")
    var seconds: Double?

    @Option(help: "topology: plan for the machine described by this sysfs tree (default: SPINDLE_SYSFS_ROOT or /sys).")
    var sysfs: String?

    @Option(help: "topology: plan for this CPU list, e.g. 0-63,128-191 (default: this process's affinity).")
    var cpus: String?

    @Option(help: "topology: pinning mode: node, core or none.")
    var pinning: String = "node"

    @Flag(help: "Small sizes and few repetitions: the whole suite in one to two minutes.")
    var quick = false

    @Option(help: "Comma-separated cases to run (default: all). Known: \(Bench.allCases.joined(separator: ", ")).")
    var cases: String?

    @Option(help: "Comma-separated systems to run within each case (default: all; each case's reference runs too, since ratios need it, unless --alone).")
    var systems: String?

    @Flag(help: "Run only the systems named with --systems, without their case's reference, and take no ratios against it: for counting one system's page faults, system calls or context switches by itself (perf stat, strace -c). The QoS, priority-inversion and quota cases still run their floors.")
    var alone = false

    @Option(help: "Tasks per repetition (overrides each case's default).")
    var tasks: Int?

    @Option(help: "Repetitions per case.")
    var reps: Int?

    @Option(help: "Spindle worker threads (default: one per usable CPU).")
    var workers: Int?

    @Option(help: "fork-join: recursion below this n runs serially (smaller: more, cheaper forks).")
    var forkCutoff: Int = 3

    @Option(help: "operation-throughput: the bytes of pool-submit-object's object (default: a BlockOperation's allocation size), to see what an object's size costs when another thread frees it.")
    var objectBytes: Int?

    @Option(help: "Output format.")
    var format: Format = .table

    @Option(help: "Write the report to this file instead of standard output.")
    var output: String?

    @Option(help: "Also write a bar chart of the ratios to this SVG file.")
    var plot: String?

    func validate() throws {
        if let mode, mode != "topology" && mode != "quota-child" {
            throw ValidationError("unknown mode '\(mode)'; the only mode is 'topology' (run without it for the timed cases)")
        }
        if !["node", "core", "none"].contains(pinning) { throw ValidationError("--pinning must be node, core or none") }
        if let objectBytes, objectBytes < 32 || objectBytes > 1 << 20 {
            throw ValidationError("--object-bytes must be from 32 to 1048576, got \(objectBytes)")
        }
        if alone && systems == nil { throw ValidationError("--alone needs --systems: the systems to run by themselves") }
        if let t = tasks, t < 1 { throw ValidationError("--tasks must be at least 1") }
        if let r = reps, r < 1 { throw ValidationError("--reps must be at least 1") }
        if let w = workers, w < 1 { throw ValidationError("--workers must be at least 1") }
        for c in selectedCases where !Bench.allCases.contains(c) {
            throw ValidationError("unknown case '\(c)'; known cases: \(Bench.allCases.joined(separator: ", "))")
        }
    }

    var selectedCases: [String] {
        guard let cases else { return Bench.allCases }
        return cases.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
    }

    func run() throws {
        if let systems {
            systemFilter = Set(systems.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) })
        }
        if alone { runReference = false }
        poolSubmitObjectBytes = objectBytes
        if mode == "quota-child" { return try quotaChild(seconds: seconds ?? 2) }
        if mode == "topology" {
            let topo = try Topology.load(sysfsRoot: sysfs, cpus: cpus)
            let pin: ThreadPool.Pinning = pinning == "core" ? .core : pinning == "none" ? .none : .node
            let clock = ContinuousClock()
            var plan: PlacementPlan?
            let planning = try clock.measure { plan = try topo.plan(workers: workers, pinning: pin) }
            FileHandle.standardError.write(Data("planned \(plan!.workers.count) workers on \(topo.nodes.count) node(s) in \(milliseconds(planning)) ms\n".utf8))
            let text = renderTopology(topo, plan!, format: format)
            if let output { try text.write(toFile: output, atomically: true, encoding: .utf8) } else { print(text, terminator: "") }
            return
        }
        let pool = try ThreadPool(workers: workers)
        let nio = NIOPeer(threads: pool.workerCount)
        defer { try? nio.shutdown() }
        let machine = Machine.detect(cpus: pool.workerCount)
        let reps = self.reps ?? (quick ? 5 : 15)
        var results = [CaseResult]()
        for c in selectedCases {
            switch c {
            case "submit":
                results.append(try submitCase(pool: pool, nio: nio, tasks: tasks ?? (quick ? 50_000 : 200_000), reps: reps))
            case "contended":
                results += try contendedCases(pool: pool, nio: nio, tasks: tasks ?? (quick ? 48_000 : 400_000), reps: reps)
            case "fork-join":
                let n = quick ? 25 : 28
                results.append(try forkJoinCase(pool: pool, n: n, cutoff: forkCutoff, reps: reps))
            case "parallel-for":
                results.append(try parallelForCase(pool: pool, tasks: tasks ?? (quick ? 1_000_000 : 4_000_000), reps: reps))
            case "operation-throughput":
                results.append(try operationThroughputCase(name: c, tasks: tasks ?? (quick ? 20_000 : 100_000), reps: reps, width: nil))
            case "serial-queue":
                results.append(try operationThroughputCase(name: c, tasks: tasks ?? (quick ? 10_000 : 50_000), reps: reps, width: 1))
            case "dependency-chain":
                // Foundation's chain costs grow with its length (it rescans waiting
                // operations): a smaller `--tasks` shortens its chain too.
                results.append(try dependencyChainCase(spindleTasks: tasks ?? (quick ? 100_000 : 1_000_000),
                                                       foundationTasks: min(quick ? 1_000 : 5_000, tasks.map { max(100, $0 / 20) } ?? .max),
                                                       reps: min(reps, quick ? 3 : 5)))
            case "blocking":
                results.append(try blockingCase(tasks: tasks ?? (quick ? 200 : 1_000), width: 16, reps: min(reps, quick ? 3 : 5)))
            case "latency":
                results.append(try latencyCase(pool: pool, nio: nio, samples: tasks ?? (quick ? 300 : 2_000), reps: min(reps, quick ? 3 : 5)))
            case "qos-under-load":
                results.append(try qosUnderLoadCase(samples: tasks ?? (quick ? 100 : 500), reps: min(reps, quick ? 3 : 5), cpus: pool.workerCount))
            case "async-offload":
                results.append(try asyncOffloadCase(pool: pool, nio: nio, tasks: tasks ?? (quick ? 5_000 : 20_000), reps: reps))
            case "priority-inversion":
                results += try priorityInversionCases(samples: tasks ?? (quick ? 8 : 25), reps: min(reps, quick ? 2 : 3),
                                                      cpus: pool.workerCount, workMicros: 3_000)
            case "quota":
                results += try quotaCases(reps: min(reps, quick ? 2 : 3), seconds: seconds ?? (quick ? 1 : 3))
            case "idle-cpu":
                let pools = [pool, ThreadPool.shared] + [QualityOfService.background, .userInteractive].map(ThreadPool.forQualityOfService)
                results.append(try idleCPUCase(pools: pools, seconds: quick ? 0.5 : 1.0, reps: 3))
            default:
                break
            }
        }
        let text: String
        switch format {
        case .table: text = renderTable(machine: machine, results: results)
        case .json: text = renderJSON(machine: machine, results: results) + "\n"
        case .markdown: text = renderMarkdown(machine: machine, results: results)
        }
        if let plot {
            try renderSVG(machine: machine, results: results).write(toFile: plot, atomically: true, encoding: .utf8)
            progress("wrote \(plot)")
        }
        if let output {
            try text.write(toFile: output, atomically: true, encoding: .utf8)
            progress("wrote \(output)")
        } else {
            print(text, terminator: "")
        }
    }
}

/// A duration in milliseconds, to three decimals.
func milliseconds(_ d: Duration) -> String {
    String(format: "%.3f", Double(d.components.seconds) * 1e3 + Double(d.components.attoseconds) / 1e15)
}
