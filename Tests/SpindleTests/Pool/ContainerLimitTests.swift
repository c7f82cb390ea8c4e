import CSpindle
import Dispatch
import Foundation
import Synchronization
import XCTest

@testable import Spindle

/// Worker counts that follow the container's CPU limit (cgroup.c, CG3-CG6), in child
/// processes placed in real cgroup v1 `cpu` groups. Needs root and the v1 cpu
/// controller at /sys/fs/cgroup/cpu; skipped elsewhere.
final class ContainerLimitTests: XCTestCase {
    static let controller = "/sys/fs/cgroup/cpu"
    static let classes: [QualityOfService] = [.userInteractive, .userInitiated, .default, .utility, .background]

    /// A fresh cpu group with `quota` µs per 100 ms, removed after the test.
    func cpuGroup(quota: Int) throws -> String {
        guard getuid() == 0, FileManager.default.isWritableFile(atPath: Self.controller + "/cgroup.procs") else {
            throw XCTSkip("needs root and the cgroup v1 cpu controller at \(Self.controller)")
        }
        let dir = Self.controller + "/spindle-test-\(getpid())-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: false)
        addTeardownBlock {
            // The child has exited; a group can be removed once it holds no process.
            for _ in 0..<100 where rmdir(dir) != 0 { usleep(10_000) }
        }
        try setQuota(dir, quota)
        return dir
    }

    func setQuota(_ dir: String, _ quota: Int) throws {
        try "100000".write(toFile: dir + "/cpu.cfs_period_us", atomically: false, encoding: .utf8)
        try "\(quota)".write(toFile: dir + "/cpu.cfs_quota_us", atomically: false, encoding: .utf8)
    }

    /// Runs one test of this binary in a child process placed in `group`.
    static func runInGroup(_ group: String, _ test: String, environment: [String: String]) throws -> (Int32, String) {
        let script = "echo $$ > \"$0\"/cgroup.procs && exec \"$1\" \"$2\""
        var env = environment
        env["PATH"] = "/usr/bin:/bin"
        env["HOME"] = "/tmp"
        return try runChild("/bin/sh", ["-c", script, group, CommandLine.arguments[0], test], environment: env)
    }

    /// What each class pool's workers are, as the probes print it.
    static func describeClasses() -> String {
        classes.map { q -> String in
            let p = ThreadPool.forQualityOfService(q)
            return "\(p.activeWorkerCount)/\(p.workerCount)"
        }.joined(separator: " ")
    }

    /// Submits `perClass` tasks to every class pool; how many ran within a minute.
    static func runOnEveryClass(_ perClass: Int) throws -> Int {
        let ran = Atomic<Int>(0)
        let all = DispatchSemaphore(value: 0)
        let total = perClass * classes.count
        for q in classes {
            for _ in 0..<perClass {
                try ThreadPool.forQualityOfService(q).submit {
                    if ran.add(1, ordering: .relaxed).newValue == total { all.signal() }
                }
            }
        }
        _ = all.wait(timeout: .now() + 60)
        return ran.load(ordering: .relaxed)
    }

    // MARK: - Half a CPU

    func testAProcessInAHalfCPUGroupGetsOneWorkerPerClass() throws {
        if ProcessInfo.processInfo.environment["SPINDLE_LIMIT_PROBE"] != nil {
            let limit = ThreadPool.cpuLimit
            print("LIMIT \(limit.map { "\($0.cpus) \($0.workers) v\($0.cgroupVersion)" } ?? "none")")
            print("CLASSES \(Self.describeClasses())")
            let own = try ThreadPool()
            let explicit = try ThreadPool(workers: 2)
            print("POOLS default=\(own.workerCount)/\(own.activeWorkerCount) explicit=\(explicit.workerCount)")
            // Every class still runs its work with one worker.
            print("RAN \(try Self.runOnEveryClass(100))")
            try own.shutdown()
            try explicit.shutdown()
            return
        }
        let group = try cpuGroup(quota: 50_000)
        let (status, text) = try Self.runInGroup(group, "SpindleTests.ContainerLimitTests/testAProcessInAHalfCPUGroupGetsOneWorkerPerClass",
                                            environment: ["SPINDLE_LIMIT_PROBE": "1"])
        XCTAssertEqual(status, 0, text)
        let lines = text.split(separator: "\n").map(String.init)
        XCTAssertTrue(lines.contains("LIMIT 0.5 1 v1"), text)
        let cpus = spindle_usable_cpu_count()
        XCTAssertTrue(lines.contains("CLASSES " + Array(repeating: "1/\(cpus)", count: 5).joined(separator: " ")), text)
        XCTAssertTrue(lines.contains("POOLS default=1/1 explicit=2"), "an explicit count wins: \(text)")
        XCTAssertTrue(lines.contains("RAN 500"), text)
    }

    /// SPINDLE_WORKERS replaces the limit's count (or the CPU count), for operators.
    func testTheEnvironmentVariableSetsTheCount() throws {
        if ProcessInfo.processInfo.environment["SPINDLE_LIMIT_PROBE"] != nil {
            print("CLASSES \(Self.describeClasses())")
            return
        }
        let test = "SpindleTests.ContainerLimitTests/testTheEnvironmentVariableSetsTheCount"
        let (status, text) = try runChild(CommandLine.arguments[0], [test],
                                          environment: ["SPINDLE_LIMIT_PROBE": "1", "SPINDLE_WORKERS": "1"])
        XCTAssertEqual(status, 0, text)
        let cpus = spindle_usable_cpu_count()
        XCTAssertTrue(text.contains("CLASSES " + Array(repeating: "1/\(cpus)", count: 5).joined(separator: " ")), text)
        let (badStatus, bad) = try runChild(CommandLine.arguments[0], [test],
                                            environment: ["SPINDLE_LIMIT_PROBE": "1", "SPINDLE_WORKERS": "lots"])
        XCTAssertEqual(badStatus, 0, bad)
        XCTAssertTrue(bad.contains("SPINDLE_WORKERS=lots is not a worker count"), bad)
        // Ignored, it leaves the count to the CPU limit, when the tests run under one.
        let active = min(Int(cpus), ThreadPool.cpuLimit?.workers ?? Int(cpus))
        XCTAssertTrue(bad.contains("CLASSES " + Array(repeating: "\(active)/\(cpus)", count: 5).joined(separator: " ")), bad)
    }

    // MARK: - A quota changed while the process runs

    /// The child waits for files the parent creates: `step` names them.
    static func waitForFile(_ path: String) -> Bool {
        eventually(within: 60) { FileManager.default.fileExists(atPath: path) }
    }

    /// Keeps every class pool busy (so that the monitor ticks and reads the limit) until
    /// `done` says so, with work that spawns work (on the workers' own deques, which a
    /// retiring worker must hand on): returns how many tasks were submitted and ran.
    static func busyUntil(_ done: () -> Bool) -> (submitted: Int, ran: Int) {
        let submitted = Atomic<Int>(0), ran = Atomic<Int>(0)
        while !done() {
            for q in classes {
                let pool = ThreadPool.forQualityOfService(q)
                submitted.add(1, ordering: .relaxed)
                try? pool.submit {
                    for _ in 0..<8 {
                        submitted.add(1, ordering: .relaxed)
                        try? pool.submit { ran.add(1, ordering: .relaxed) }
                    }
                    ran.add(1, ordering: .relaxed)
                }
            }
            usleep(200)
        }
        _ = eventually(within: 60) { ran.load(ordering: .relaxed) == submitted.load(ordering: .relaxed) }
        return (submitted.load(ordering: .relaxed), ran.load(ordering: .relaxed))
    }

    func testChangingTheQuotaResizesTheProcessWidePoolsWithNothingLost() throws {
        if let dir = ProcessInfo.processInfo.environment["SPINDLE_LIMIT_PROBE"] {
            let allAt = { (n: Int) in Self.classes.allSatisfy { ThreadPool.forQualityOfService($0).activeWorkerCount == n } }
            print("START \(Self.describeClasses())")
            _ = FileManager.default.createFile(atPath: dir + "/ready", contents: nil)
            let deadline = DispatchTime.now() + 60
            let grew = Self.busyUntil { allAt(2) || DispatchTime.now() > deadline }
            print("GREW \(Self.describeClasses()) lost=\(grew.submitted - grew.ran)")
            _ = FileManager.default.createFile(atPath: dir + "/grown", contents: nil)
            let deadline2 = DispatchTime.now() + 60
            let shrank = Self.busyUntil { allAt(1) || DispatchTime.now() > deadline2 }
            print("SHRANK \(Self.describeClasses()) lost=\(shrank.submitted - shrank.ran)")
            // After the shrink, everything still runs, including work spawned on workers.
            let after = Self.busyUntil { true }
            print("AFTER lost=\(after.submitted - after.ran) ran=\(try Self.runOnEveryClass(200))")
            return
        }
        guard spindle_usable_cpu_count() >= 2 else { throw XCTSkip("needs two CPUs to grow to") }
        let group = try cpuGroup(quota: 50_000)
        let control = FileManager.default.temporaryDirectory.appendingPathComponent("spindle-limit-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: control, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: control) }
        let test = "SpindleTests.ContainerLimitTests/testChangingTheQuotaResizesTheProcessWidePoolsWithNothingLost"
        let outcome = Mutex<(Int32, String)?>(nil)
        let child = Thread {
            let r = try? Self.runInGroup(group, test, environment: ["SPINDLE_LIMIT_PROBE": control])
            outcome.locked { $0 = r ?? (-1, "could not start the child") }
        }
        child.start()
        XCTAssertTrue(Self.waitForFile(control + "/ready"), "the child did not start")
        try setQuota(group, 200_000) // two CPUs
        XCTAssertTrue(Self.waitForFile(control + "/grown"), "the child did not see the quota grow")
        try setQuota(group, 50_000)
        XCTAssertTrue(eventually(within: 120) { outcome.locked { $0 } != nil })
        let (status, text) = outcome.locked { $0 } ?? (-1, "")
        XCTAssertEqual(status, 0, text)
        let cpus = spindle_usable_cpu_count()
        let lines = text.split(separator: "\n").map(String.init)
        XCTAssertTrue(lines.contains("START " + Array(repeating: "1/\(cpus)", count: 5).joined(separator: " ")), text)
        XCTAssertTrue(lines.contains("GREW " + Array(repeating: "2/\(cpus)", count: 5).joined(separator: " ") + " lost=0"), text)
        XCTAssertTrue(lines.contains("SHRANK " + Array(repeating: "1/\(cpus)", count: 5).joined(separator: " ") + " lost=0"), text)
        XCTAssertTrue(lines.contains("AFTER lost=0 ran=1000"), text)
    }
}
