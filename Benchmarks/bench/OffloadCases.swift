import BenchSupport
import Dispatch
import Foundation
import NIOPosix
import Spindle

/// swift-nio's thread pool, the peer Swift servers offload blocking and CPU work to
/// today: one thread per usable CPU, started once for the whole run.
final class NIOPeer: Sendable {
    let pool: NIOThreadPool

    init(threads: Int) {
        pool = NIOThreadPool(numberOfThreads: threads)
        pool.start()
    }

    func shutdown() throws { try pool.syncShutdownGracefully() }
}

/// `bare-offload`: the offload of `BenchSupport/offload.c`, threads of its own with a
/// ring each and nothing of a pool, started once for the case.
final class BareOffload: @unchecked Sendable {
    // @unchecked: `raw` is set once; the C side is safe to call from any thread.
    private let raw: OpaquePointer

    init() throws {
        guard let raw = unsafe bench_offload_create() else {
            throw BenchFailure("async-offload: bare-offload could not start its threads (errno \(errno))")
        }
        self.raw = raw
    }

    deinit { bench_offload_destroy(raw) }

    /// `offloadWork(input)` on one of the bare offload's threads, which resumes the task
    /// with its result: the least an offload to another set of threads does.
    func run(_ input: Int) async -> Int {
        await withUnsafeContinuation { (continuation: UnsafeContinuation<Int, Never>) in
            // An unsafe continuation is one reference to the task: it travels as the
            // context word and is resumed exactly once, by the thread that runs the work.
            let context = unsafeBitCast(continuation, to: UnsafeMutableRawPointer.self)
            bench_offload_submit(raw, { context, input in
                let continuation = unsafeBitCast(context, to: UnsafeContinuation<Int, Never>.self)
                continuation.resume(returning: offloadWork(input))
            }, context, input)
        }
    }
}

/// Runs `body` on a task and waits for it on this (outside) thread: the cases' systems
/// are timed from a plain thread, as a server's benchmark client would be.
func awaitFromThread<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) throws -> T {
    let outcome = AsyncOutcome<T>()
    Task.detached {
        do {
            outcome.result = .success(try await body())
        } catch {
            outcome.result = .failure(error)
        }
        outcome.done.signal()
    }
    outcome.done.wait()
    return try outcome.result!.get()
}

/// What `awaitFromThread`'s task produced.
final class AsyncOutcome<T>: @unchecked Sendable {
    // @unchecked: `result` is written by the task before `done` is signalled, and read by
    // the waiting thread after.
    var result: Result<T, any Error>?
    let done = DispatchSemaphore(value: 0)
}

/// The work each offload does: a little arithmetic over a small buffer, so that the
/// case measures the hand-off, not the work.
@inline(never)
func offloadWork(_ input: Int) -> Int {
    var acc = input
    for i in 0..<64 { acc = acc &* 31 &+ i }
    return acc
}

/// Concurrent tasks, each awaiting offloaded closures one after another: what a server's
/// request handlers do when they hand CPU work to a pool. Per offload. The tasks are
/// created once per repetition, so the figure is the hand-off there and back — the
/// submission, the wake-up, the resumption — not task creation.
func asyncOffloadCase(pool: ThreadPool, nio: NIOPeer, tasks: Int, reps: Int) throws -> CaseResult {
    let concurrency = 16
    let perTask = tasks / concurrency
    let total = perTask * concurrency
    let expected = (0..<concurrency).reduce(0) { sum, t in
        (0..<perTask).reduce(sum) { $0 &+ offloadWork(t * perTask + $1) }
    }
    func system(_ name: String, preferring executor: ThreadPool? = nil,
                _ offload: @escaping @Sendable (Int) async throws -> Int) -> SystemRun {
        SystemRun(name: name) {
            let (ns, sum) = try timed {
                try awaitFromThread {
                    try await withThrowingTaskGroup(of: Int.self) { group in
                        for t in 0..<concurrency {
                            group.addTask(executorPreference: executor) {
                                var acc = 0
                                for i in 0..<perTask { acc = acc &+ (try await offload(t * perTask + i)) }
                                return acc
                            }
                        }
                        return try await group.reduce(0, &+)
                    }
                }
            }
            guard sum == expected else { throw BenchFailure("async-offload: \(name) lost or repeated work") }
            return ns
        }
    }
    let queue = Spindle.OperationQueue()
    let bare = try BareOffload()
    var result = try measure("async-offload", tasks: total, reps: reps, reference: "nio",
                             alsoVs: [("spindle", "detached"), ("spindle", "bare-offload"),
                                      ("bare-offload", "detached"), ("spindle-preferred", "detached")], [
        system("spindle") { i in try await pool.run { offloadWork(i) } },
        system("spindle-queue") { i in try await queue.run { offloadWork(i) } },
        system("spindle-preferred", preferring: pool) { i in try await pool.run { offloadWork(i) } },
        system("nio") { i in try await nio.pool.runIfActive { offloadWork(i) } },
        system("detached") { i in await Task.detached { offloadWork(i) }.value },
        system("bare-offload") { i in await bare.run(i) },
        system("inline") { i in offloadWork(i) },
    ])
    result.note = "\(concurrency) tasks, each awaiting \(perTask) offloads in turn; spindle-queue: an OperationQueue's run; spindle-preferred: the tasks prefer the pool as their executor, so each run is a call on the worker the task runs on; bare-offload: the plainest offload to threads of its own (a ring each, 50 µs of looking again, a futex sleep), what the two hand-offs cost by themselves; inline: the work called in the task, no offload"
    return result
}
