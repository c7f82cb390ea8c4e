import ArgumentParser
import Foundation
import Hummingbird
import NIOCore
import NIOPosix
import Spindle
import Synchronization

/// Where the heavy endpoint's CPU work runs.
enum Strategy: String, ExpressibleByArgument, CaseIterable, Sendable {
    /// In the handler, on Swift's cooperative pool.
    case inline
    /// `Task.detached`.
    case detached
    /// `NIOThreadPool.runIfActive`, one thread per CPU.
    case nio
    /// Spindle's async offload, `ThreadPool.run`, on a quality-of-service class.
    case spindle
    /// The handler itself on a Spindle pool of that class (`withTaskExecutorPreference`),
    /// where `ThreadPool.run` runs the work inline.
    case spindleExecutor = "spindle-executor"
    /// An operation of a Spindle `OperationQueue` of that class, awaited.
    case spindleQueue = "spindle-queue"
    /// Spindle's offload with admission control: 503 when the pool's queue is full.
    case spindleLimited = "spindle-limited"
}

@main
struct ServiceBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "An HTTP service with a heavy and a light endpoint, for scripts/service-bench.sh.")

    @Option(help: "Where the heavy work runs: \(Strategy.allCases.map(\.rawValue).joined(separator: ", ")).")
    var strategy: Strategy = .spindle

    @Option(help: "The quality of service of Spindle's pool or queue: default, utility or background.")
    var qos: String = "utility"

    @Option(help: "spindle-limited: the most requests queued for the pool before it answers 503 (default: 4 per CPU).")
    var queueLimit: Int = 4 * ProcessInfo.processInfo.activeProcessorCount

    @Option(help: "Exit after this many seconds, whatever happens.")
    var maxSeconds: Int = 120

    @Option(help: "Write the heavy endpoint's request body (a ~100 KB JSON catalog) to this file and exit.")
    var writeBody: String?

    func run() async throws {
        if let writeBody {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys]
            try encoder.encode(Catalog.sample(count: 260)).write(to: URL(fileURLWithPath: writeBody))
            return
        }
        let qualityOfService: QualityOfService
        switch qos {
        case "background": qualityOfService = .background
        case "default": qualityOfService = .default
        case "utility": qualityOfService = .utility
        default: throw ValidationError("--qos must be default, utility or background, got \(qos)")
        }
        let heavy = try Heavy(strategy: strategy, qos: qualityOfService, queueLimit: queueLimit)
        let router = Router()
        router.get("/light") { _, _ in "ok" }
        router.post("/heavy") { request, _ -> Response in
            let body = try await request.body.collect(upTo: 4 << 20)
            guard let out = try await heavy.handle(Array(body.readableBytesView)) else {
                return Response(status: .serviceUnavailable)
            }
            return Response(status: .ok, headers: [.contentType: "application/json"],
                            body: ResponseBody(byteBuffer: ByteBuffer(bytes: out)))
        }
        let app = Application(
            router: router,
            configuration: .init(address: .hostname("127.0.0.1", port: 0), serverName: "service-bench"),
            onServerRunning: { channel in
                // Unbuffered: the script waits for this line.
                FileHandle.standardOutput.write(Data("PORT \(channel.localAddress?.port ?? 0)\n".utf8))
            })
        let limit = maxSeconds
        Task.detached {
            try? await Task.sleep(for: .seconds(limit))
            Foundation.exit(0)
        }
        try await app.runService(gracefulShutdownSignals: [.sigterm, .sigint])
        heavy.shutdown()
        // What the heavy requests cost: the CPU time of the work itself, on whichever
        // thread ran it, and the whole process's. The script reads this line.
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        let processMicros = (Int(usage.ru_utime.tv_sec) + Int(usage.ru_stime.tv_sec)) * 1_000_000
            + Int(usage.ru_utime.tv_usec) + Int(usage.ru_stime.tv_usec)
        FileHandle.standardOutput.write(Data(
            "CPU {\"heavy\":\(heavy.served.load(ordering: .relaxed)),\"work_us\":\(heavy.workMicros.load(ordering: .relaxed)),\"process_us\":\(processMicros)}\n".utf8))
    }
}

/// The heavy endpoint's work, run the way the strategy says.
final class Heavy: Sendable {
    let strategy: Strategy
    let nio: NIOThreadPool?
    let pool: ThreadPool?
    let queue: Spindle.OperationQueue?
    /// Heavy requests whose work ran, and the thread CPU time it took.
    let served = Atomic<Int>(0)
    let workMicros = Atomic<Int>(0)

    init(strategy: Strategy, qos: QualityOfService, queueLimit: Int) throws {
        self.strategy = strategy
        let cpus = ProcessInfo.processInfo.activeProcessorCount
        switch strategy {
        case .nio:
            let nio = NIOThreadPool(numberOfThreads: cpus)
            nio.start()
            self.nio = nio
            pool = nil
            queue = nil
        case .spindle, .spindleExecutor:
            nio = nil
            pool = ThreadPool.forQualityOfService(qos)
            queue = nil
        case .spindleQueue:
            nio = nil
            pool = nil
            let q = Spindle.OperationQueue()
            q.qualityOfService = qos
            queue = q
        case .spindleLimited:
            // A pool of its own, at the class's nice value, with a queue limit.
            let classPool = ThreadPool.forQualityOfService(qos)
            var config = ThreadPool.Configuration()
            config.nice = classPool.effectiveNice
            config.policy = qos == .background ? .idle : qos == .utility ? .batch : .normal
            config.name = "spindle-lim"
            config.queueLimit = queueLimit
            nio = nil
            pool = try ThreadPool(configuration: config)
            queue = nil
        case .inline, .detached:
            nio = nil
            pool = nil
            queue = nil
        }
    }

    /// The response body, or nil for a 503.
    func handle(_ body: [UInt8]) async throws -> [UInt8]? {
        switch strategy {
        case .inline: return try work(body)
        case .detached: return try await Task.detached { try self.work(body) }.value
        case .nio: return try await nio!.runIfActive { try self.work(body) }
        case .spindle: return try await pool!.run { try self.work(body) }
        case .spindleExecutor:
            return try await withTaskExecutorPreference(pool!) { try await self.pool!.run { try self.work(body) } }
        case .spindleQueue: return try await queue!.run { try self.work(body) }
        case .spindleLimited:
            do {
                return try await pool!.run(ifFull: .fail) { try self.work(body) }
            } catch ThreadPool.Error.overloaded {
                return nil
            }
        }
    }

    /// `price`, with its thread CPU time counted.
    func work(_ body: [UInt8]) throws -> [UInt8] {
        let start = threadCPUMicros()
        defer {
            workMicros.add(threadCPUMicros() - start, ordering: .relaxed)
            served.add(1, ordering: .relaxed)
        }
        return try price(body)
    }

    func shutdown() {
        try? nio?.syncShutdownGracefully()
    }
}

/// The calling thread's CPU time, in microseconds.
func threadCPUMicros() -> Int {
    var ts = timespec()
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts)
    return ts.tv_sec * 1_000_000 + ts.tv_nsec / 1000
}
