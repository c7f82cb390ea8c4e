import CSpindle
import Foundation
import XCTest

@testable import Spindle

/// The cgroup reader (cgroup.c, CG1-CG4) on fixture trees: each test writes the files a
/// process would see under a root of its own.
final class CPULimitTests: XCTestCase {
    /// A fixture root: `files` maps paths (from the root) to contents.
    func tree(_ files: [String: String]) throws -> String {
        let root = FileManager.default.temporaryDirectory
            .appendingPathComponent("spindle-cgroup-\(UUID().uuidString)").path
        for (path, text) in files {
            let url = URL(fileURLWithPath: root + path)
            try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
            try text.write(to: url, atomically: true, encoding: .utf8)
        }
        addTeardownBlock { try? FileManager.default.removeItem(atPath: root) }
        return root
    }

    struct Read: Equatable {
        var cpus: Double, workers: UInt32, version: Int32, dir: String, reason: String
    }

    func read(_ root: String) -> Read {
        var l = spindle_cpu_limit()
        XCTAssertEqual(spindle_cgroup_cpu_limit(root, &l), 0)
        let dir = withUnsafeBytes(of: l.dir) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        let reason = withUnsafeBytes(of: l.reason) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        return Read(cpus: l.cpus, workers: l.workers, version: l.version, dir: dir, reason: reason)
    }

    static let v2Mount = "30 23 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"
    static let v1Mount = "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct\n"

    func v2(_ group: String, _ limits: [String: String], mountRoot: String = "/") throws -> String {
        var files = [
            "/proc/self/cgroup": "0::\(group)\n",
            "/proc/self/mountinfo": "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n"
                + Self.v2Mount.replacingOccurrences(of: " / /sys/fs/cgroup ", with: " \(mountRoot) /sys/fs/cgroup "),
        ]
        for (dir, max) in limits { files["/sys/fs/cgroup\(dir)/cpu.max"] = max }
        return try tree(files)
    }

    func testCgroupV2Limits() throws {
        XCTAssertEqual(read(try v2("/app", ["/app": "max 100000\n"])).workers, 0, "max: no limit")
        let half = read(try v2("/app", ["/app": "50000 100000\n"]))
        XCTAssertEqual(half, Read(cpus: 0.5, workers: 1, version: 2, dir: "/sys/fs/cgroup/app", reason: ""))
        let oneAndHalf = read(try v2("/app", ["/app": "150000 100000\n"]))
        XCTAssertEqual(oneAndHalf.cpus, 1.5)
        XCTAssertEqual(oneAndHalf.workers, 2, "rounded up")
    }

    /// CG1: a tighter limit on an ancestor wins, and a looser one does not.
    func testTheTightestAncestorWins() throws {
        let nested = read(try v2("/kubepods/pod1/c1", [
            "/kubepods": "400000 100000", "/kubepods/pod1": "100000 100000", "/kubepods/pod1/c1": "max 100000",
        ]))
        XCTAssertEqual(nested.cpus, 1)
        XCTAssertEqual(nested.dir, "/sys/fs/cgroup/kubepods/pod1")
        let looserParent = read(try v2("/a/b", ["/a": "800000 100000", "/a/b": "250000 100000"]))
        XCTAssertEqual(looserParent.cpus, 2.5)
        XCTAssertEqual(looserParent.workers, 3)
    }

    /// A container whose group is the mount's root (a cgroup namespace): its own files
    /// are at the mount point.
    func testANamespacedGroupReadsTheMountPoint() throws {
        let r = read(try v2("/", ["": "200000 100000"]))
        XCTAssertEqual(r.workers, 2)
        XCTAssertEqual(r.dir, "/sys/fs/cgroup")
        // Mounted root below the group's path (docker on v1 style): the rest is relative.
        let v1 = try tree([
            "/proc/self/cgroup": "4:cpu,cpuacct:/docker/abc\n",
            "/proc/self/mountinfo": "32 31 0:29 /docker/abc /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n",
            "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us": "150000\n",
            "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000\n",
        ])
        XCTAssertEqual(read(v1), Read(cpus: 1.5, workers: 2, version: 1, dir: "/sys/fs/cgroup/cpu,cpuacct", reason: ""))
    }

    /// CG2: a hybrid system's cpu controller is v1's, even with v2 mounted beside it.
    func testCgroupV1AndHybrid() throws {
        let root = try tree([
            "/proc/self/cgroup": "4:cpu,cpuacct:/svc\n0::/svc\n",
            "/proc/self/mountinfo": Self.v1Mount + "41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n",
            "/sys/fs/cgroup/cpu,cpuacct/svc/cpu.cfs_quota_us": "50000\n",
            "/sys/fs/cgroup/cpu,cpuacct/svc/cpu.cfs_period_us": "100000\n",
            "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us": "-1\n",
            "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000\n",
        ])
        XCTAssertEqual(read(root), Read(cpus: 0.5, workers: 1, version: 1, dir: "/sys/fs/cgroup/cpu,cpuacct/svc", reason: ""))
    }

    /// No controller, no files, no hierarchy: no limit, and no complaint.
    func testAMissingControllerIsNoLimit() throws {
        XCTAssertEqual(read(try v2("/app", [:])), Read(cpus: 0, workers: 0, version: 2, dir: "", reason: ""))
        let noCPU = try tree([
            "/proc/self/cgroup": "5:memory:/app\n",
            "/proc/self/mountinfo": "35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n",
        ])
        XCTAssertEqual(read(noCPU).workers, 0)
        XCTAssertEqual(read(try tree([:])).workers, 0, "no /proc files at all")
    }

    /// CG4: malformed files give no limit, with the reason; never a crash or a guess.
    func testMalformedFilesFallBackWithAReason() throws {
        for bad in ["", "max", "100000", "abc 100000", "50000 0", "-5 100000", "50000 100000 7",
                    "50000  100000", "99999999999999999999 100000", "50000 100000\n\n", "max 0"] {
            let r = read(try v2("/app", ["/app": bad]))
            XCTAssertEqual(r.workers, 0, "cpu.max \(bad.debugDescription)")
            XCTAssertTrue(r.reason.contains("/sys/fs/cgroup/app/cpu.max"), "cpu.max \(bad.debugDescription): \(r.reason)")
        }
        // A malformed ancestor spoils a good child's limit too: the tightest cannot be known.
        let spoiled = read(try v2("/a/b", ["/a": "garbage", "/a/b": "50000 100000"]))
        XCTAssertEqual(spoiled.workers, 0)
        XCTAssertFalse(spoiled.reason.isEmpty)
        // v1: a quota without a period, and a zero period.
        for (quota, period) in [("50000", nil), ("50000", "0"), ("x", "100000"), ("-2", "100000")] as [(String, String?)] {
            var files = ["/proc/self/cgroup": "4:cpu,cpuacct:/\n", "/proc/self/mountinfo": Self.v1Mount,
                         "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us": quota]
            if let period { files["/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us"] = period }
            let r = read(try tree(files))
            XCTAssertEqual(r.workers, 0, "quota \(quota), period \(period ?? "missing")")
            XCTAssertFalse(r.reason.isEmpty, "quota \(quota), period \(period ?? "missing")")
        }
        // Garbage in the process files themselves.
        for junk in ["\u{0}\u{1}::::\n", "0::relative\n", ":::\n", String(repeating: "9:cpu:/", count: 5000)] {
            XCTAssertEqual(read(try tree(["/proc/self/cgroup": junk, "/proc/self/mountinfo": Self.v1Mount + Self.v2Mount])).workers, 0)
        }
        XCTAssertEqual(read(try tree(["/proc/self/cgroup": "0::/app\n", "/proc/self/mountinfo": "garbage - cgroup2\n - \n"])).workers, 0)
    }

    /// mountinfo escapes spaces in mount points as \040.
    func testEscapedMountPoints() throws {
        let root = try tree([
            "/proc/self/cgroup": "0::/app\n",
            "/proc/self/mountinfo": "30 23 0:26 / /sys/fs/my\\040cgroup rw - cgroup2 cgroup2 rw\n",
            "/sys/fs/my cgroup/app/cpu.max": "300000 100000\n",
        ])
        XCTAssertEqual(read(root).workers, 3)
    }

    /// The throttling counters of the limited group, v1's and v2's spellings.
    func testThrottlingIsReadFromCpuStat() throws {
        let root = try v2("/app", ["/app": "50000 100000"])
        try "usage_usec 100\nnr_periods 10\nnr_throttled 7\nthrottled_usec 4200\n"
            .write(toFile: root + "/sys/fs/cgroup/app/cpu.stat", atomically: true, encoding: .utf8)
        var l = spindle_cpu_limit()
        XCTAssertEqual(spindle_cgroup_cpu_limit(root, &l), 0)
        setenv("SPINDLE_CGROUP_ROOT", root, 1)
        defer { unsetenv("SPINDLE_CGROUP_ROOT") }
        var periods: UInt64 = 0, ns: UInt64 = 0
        XCTAssertEqual(spindle_cgroup_throttling(&l, &periods, &ns), 0)
        XCTAssertEqual(periods, 7)
        XCTAssertEqual(ns, 4_200_000)
    }
}
