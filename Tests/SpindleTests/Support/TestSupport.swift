import CSpindle
import Foundation
import XCTest
import Synchronization

@testable import Spindle

/// Stress sizes scale with `SPINDLE_STRESS` (default 1: small enough for every CI run,
/// including under ThreadSanitizer; a nightly-style run sets 20 or more).
enum Stress {
    static let scale: Int = {
        if let s = ProcessInfo.processInfo.environment["SPINDLE_STRESS"], let v = Int(s), v > 0 { return v }
        return 1
    }()
    /// `base` × scale, but reduced under ThreadSanitizer, which runs ~10-20× slower.
    static func count(_ base: Int) -> Int {
        let n = base * scale
        return isTSan ? max(1, n / 10) : n
    }
    static let isTSan: Bool = ProcessInfo.processInfo.environment["SPINDLE_TSAN"] == "1"
    /// Set by CI's AddressSanitizer run, whose redzones make memory measurements moot.
    static let isASan: Bool = ProcessInfo.processInfo.environment["SPINDLE_ASAN"] == "1"
}

/// A weak reference that a `@Sendable` closure can capture: for tests that check when an
/// object is freed.
final class Weak<T: AnyObject>: @unchecked Sendable {
    weak var value: T?
    init(_ value: T? = nil) { self.value = value }
}

/// This process's threads: their ids and names, from /proc/self/task/*/comm.
func threads() -> [(tid: String, name: String)] {
    let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
    return tasks.compactMap { tid in
        (try? String(contentsOfFile: "/proc/self/task/\(tid)/comm", encoding: .utf8))
            .map { (tid, $0.trimmingCharacters(in: .whitespacesAndNewlines)) }
    }
}

/// Names of this process's threads.
func threadNames() -> [String] { threads().map(\.name) }

/// Resident set size of this process, in bytes.
func residentBytes() -> Int {
    guard let s = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return 0 }
    let parts = s.split(separator: " ")
    return (Int(parts.count > 1 ? parts[1] : "0") ?? 0) * Int(sysconf(Int32(_SC_PAGESIZE)))
}

/// Runs a child process to completion; returns its exit status and everything it
/// printed (stdout and stderr together).
func runChild(_ executable: String, _ arguments: [String], environment: [String: String],
              directory: URL? = nil) throws -> (status: Int32, output: String) {
    let p = Process()
    p.executableURL = URL(fileURLWithPath: executable)
    if let directory { p.currentDirectoryURL = directory }
    p.arguments = arguments
    // A sanitizer's options go to the children too: the test binary runs itself.
    var environment = environment
    for key in ["ASAN_OPTIONS", "TSAN_OPTIONS", "SPINDLE_ASAN", "SPINDLE_TSAN"] where environment[key] == nil {
        environment[key] = ProcessInfo.processInfo.environment[key]
    }
    p.environment = environment
    let out = Pipe()
    p.standardOutput = out
    p.standardError = out
    try p.run()
    let text = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    p.waitUntilExit()
    return (p.terminationStatus, text)
}

/// Runs `body` on `count` fresh threads at once and waits for them all.
func onThreads(_ count: Int, _ body: @escaping @Sendable (Int) -> Void) {
    let group = DispatchGroup()
    for i in 0..<count {
        group.enter()
        let t = Thread {
            body(i)
            group.leave()
        }
        t.stackSize = 1 << 20
        t.start()
    }
    group.wait()
}

// XCTest re-exports Foundation, so test files see Foundation's operation types both
// directly and through Spindle; these module-level aliases pick Spindle's.
import Spindle
typealias Operation = Spindle.Operation
typealias BlockOperation = Spindle.BlockOperation
typealias OperationQueue = Spindle.OperationQueue
typealias InvocationOperation = Spindle.InvocationOperation

/// A counter any thread may bump, for tests that count what ran.
final class Counter: Sendable {
    private let count = Atomic<Int>(0)
    func increment() { count.add(1, ordering: .relaxed) }
    /// Acquiring: whatever the counted work did before its increment is visible.
    var value: Int { count.load(ordering: .acquiring) }
}

/// Polls `condition` until it holds or `seconds` pass; whether it held. For what happens
/// asynchronously by design (a completion block runs as a task of its own).
func eventually(within seconds: Double = 60, _ condition: () -> Bool) -> Bool {
    let deadline = DispatchTime.now() + seconds
    while !condition() {
        if DispatchTime.now() > deadline { return false }
        usleep(1_000)
    }
    return true
}

/// Waits until every process-wide pool (the shared pool and each class's) is idle:
/// nothing queued, no worker inside a task, twice in a row a millisecond apart. For a
/// check that something did *not* happen: once the pools are idle nothing more runs
/// until something new is submitted, so the check does not depend on how long a
/// busy machine takes. False if they stay busy for `seconds`.
@discardableResult
func settle(within seconds: Double = 60) -> Bool {
    var quiet = 0
    return eventually(within: seconds) {
        let pools = QoSPools.allProcessWide()
        quiet = pools.allSatisfy { spindle_pool_is_idle($0.raw) } ? quiet + 1 : 0
        return quiet >= 2
    }
}

/// Runs `body` on another thread and waits at most `seconds` for it: a deadlock fails
/// the test instead of hanging the suite.
func completes(within seconds: Double = 20, _ body: @escaping @Sendable () -> Void) -> Bool {
    let done = DispatchSemaphore(value: 0)
    Thread.detachNewThread {
        body()
        done.signal()
    }
    return done.wait(timeout: .now() + seconds) == .success
}

/// The workers a pool that sets no count of its own gets in this process: the count
/// `SPINDLE_WORKERS` sets, for an operator, when it is one; else the CPUs it may use,
/// capped by a container's CPU limit. Read here from the environment and the limit,
/// not from the engine's own sizing.
func defaultWorkerCount(usable: Int) -> Int {
    if let s = ProcessInfo.processInfo.environment["SPINDLE_WORKERS"], let n = Int(s), (1...4096).contains(n) { return n }
    return min(usable, ThreadPool.cpuLimit?.workers ?? usable)
}

/// The sysfs trees in Tests/SpindleTests/Fixtures/topology, which describe machines
/// this one is not (several NUMA nodes, SMT, offline CPUs).
enum Fixtures {
    static func topology(_ name: String) -> String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Fixtures/topology/\(name)").path
    }

    /// Copies the tree at `source` to `dest` (directories and regular files), owned by
    /// whoever runs the tests. Not `FileManager.copyItem`, which also copies each
    /// directory's owner and fails for a user who does not own the checkout.
    static func copyTree(_ source: String, to dest: String) throws {
        let fm = FileManager.default
        try fm.createDirectory(atPath: dest, withIntermediateDirectories: true)
        for entry in try fm.contentsOfDirectory(atPath: source) {
            let from = source + "/" + entry, to = dest + "/" + entry
            var isDirectory: ObjCBool = false
            guard fm.fileExists(atPath: from, isDirectory: &isDirectory) else { continue }
            if isDirectory.boolValue {
                try copyTree(from, to: to)
            } else {
                try Data(contentsOf: URL(fileURLWithPath: from)).write(to: URL(fileURLWithPath: to))
            }
        }
    }
}

/// Counts down from `n`; the thread that reaches zero signals the waiter.
final class Countdown: Sendable {
    let remaining: Atomic<Int>
    private let done = DispatchSemaphore(value: 0)
    init(_ n: Int) { remaining = Atomic(n) }
    func hit() {
        if remaining.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 { done.signal() }
    }
    func wait() { done.wait() }
}

/// Fails unless `task` ends by throwing `CancellationError`.
func assertEndsCancelled<T: Sendable>(_ task: Task<T, any Error>, _ message: String,
                                      file: StaticString = #filePath, line: UInt = #line) async {
    do {
        _ = try await task.value
        XCTFail(message, file: file, line: line)
    } catch is CancellationError {
    } catch {
        XCTFail("\(message): threw \(error) instead of CancellationError", file: file, line: line)
    }
}

/// Runs one test of this binary in a child process as the unprivileged user `nobody`
/// (with `setpriv`), at process nice `nice`. The binary is first copied to a folder
/// `nobody` can read, and the child starts there: a checkout in a private folder (a
/// 0700 `/root`) is out of its reach, and Foundation's bundle lookup would stop it
/// before the first test. Throws XCTSkip without root, setpriv or nice.
func runTestAsNobody(_ test: String, environment: [String: String], nice: Int = 0) throws
    -> (status: Int32, output: String) {
    guard getuid() == 0 else { throw XCTSkip("needs root to drop to an unprivileged user") }
    guard FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv"),
          FileManager.default.isExecutableFile(atPath: "/usr/bin/nice") else {
        throw XCTSkip("no setpriv or nice")
    }
    let binary = try readableCopyOfTestBinary()
    let setpriv = ["/usr/bin/setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", binary, test]
    // At the absolute nice the caller expects (0 unless it says), set while still root:
    // the suite may itself run niced, and nobody could not lower it.
    let command = niceCommand(nice) + setpriv
    var env = environment
    env["PATH"] = env["PATH"] ?? "/usr/bin:/bin"
    env["HOME"] = env["HOME"] ?? "/tmp"
    return try runChild(command[0], Array(command.dropFirst()), environment: env,
                        directory: URL(fileURLWithPath: (binary as NSString).deletingLastPathComponent))
}

/// The calling thread's nice value: the one a child it starts inherits, and on the
/// test's main thread the process's.
func threadNice() -> Int {
    errno = 0
    let n = getpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0)
    return errno == 0 ? Int(n) : 0
}

/// The nice that the workers of `qos` run at in this process: the class's offset from
/// the process's own nice (`QoSPools.nices(around:)`, whose values at nice 0
/// `QoSClassOrderTests` checks against the documented table), so that the suite passes
/// when it is itself run niced.
func classNice(_ qos: QualityOfService) -> Int { Int(QoSPools.nice(for: qos)) }

/// `nice` putting the command after it at process nice `nice`, whatever this process's
/// own (`nice -n` adds to the caller's: the suite may itself run niced).
func niceCommand(_ nice: Int) -> [String] {
    ["/usr/bin/nice", "-n", "\(nice - threadNice())"]
}

/// This test binary, copied once per process to a fresh 0755 folder under the
/// temporary directory.
func readableCopyOfTestBinary() throws -> String {
    if let copy = readableCopy.locked({ $0 }) { return copy }
    // Copied outside the lock (it throws); a racing caller's copy goes to a folder of
    // its own, and the first one stored is the one used.
    let me = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
    let dir = URL(fileURLWithPath: "/tmp").appendingPathComponent("spindle-tests-\(getpid())-\(UUID().uuidString.prefix(8))")
    try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true,
                                            attributes: [.posixPermissions: 0o755])
    let target = dir.appendingPathComponent(me.lastPathComponent)
    try FileManager.default.copyItem(at: me, to: target)
    try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: target.path)
    return readableCopy.locked { copy in
        if copy == nil { copy = target.path }
        return copy!
    }
}
private let readableCopy = Mutex<String?>(nil)

private final class ThreadBody {
    let body: @Sendable () -> Void
    init(_ body: @escaping @Sendable () -> Void) { self.body = body }
}

/// Runs `body` on a thread of its own and waits until that thread has exited: its
/// thread-local state has been torn down (pthread key destructors, the engine's node
/// heap abandoned) when this returns.
func onThreadThatExits(_ body: @escaping @Sendable () -> Void) {
    var thread = pthread_t()
    let box = Unmanaged.passRetained(ThreadBody(body)).toOpaque()
    let created = pthread_create(&thread, nil, { arg in
        let box = Unmanaged<ThreadBody>.fromOpaque(arg!).takeRetainedValue()
        box.body()
        return nil
    }, box)
    precondition(created == 0, "pthread_create: \(created)")
    pthread_join(thread, nil)
}

/// An operation that says it has finished before anything starts it, as code built on
/// a state machine of its own does: `isFinished` is its own flag, announced with
/// `willChangeValue(forKey:)` and `didChangeValue(forKey:)`. Its queue retires it.
class FinishesOnItsOwn: Operation, @unchecked Sendable {
    private let finishedFlag = Atomic<Bool>(false)
    override var isFinished: Bool { finishedFlag.load(ordering: .acquiring) }
    func finishWithoutStarting() {
        willChangeValue(forKey: "isFinished")
        finishedFlag.store(true, ordering: .releasing)
        didChangeValue(forKey: "isFinished")
    }
}
