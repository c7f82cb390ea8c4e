import Foundation
import Synchronization
import XCTest

@testable import Spindle

/// Quality-of-service classes as real Linux priorities, observed from inside the work.
final class QoSTests: XCTestCase {
    /// Runs `body` on the worker set of `qos` and returns what it saw.
    func observe<T: Sendable>(_ qos: QualityOfService, _ body: @escaping @Sendable () -> T) throws -> T {
        let out = Mutex<T?>(nil)
        let done = DispatchSemaphore(value: 0)
        try ThreadPool.forQualityOfService(qos).submit {
            let v = body()
            out.locked { $0 = v }
            done.signal()
        }
        XCTAssertEqual(done.wait(timeout: .now() + 10), .success)
        return out.locked { $0 }!
    }

    static let table: [(QualityOfService, Int, String)] = [
        (.userInteractive, -4, "spindle-ui"), (.userInitiated, -2, "spindle-in"), (.default, 0, "spindle-w"),
        (.utility, 2, "spindle-ut"), (.background, 10, "spindle-bg"),
    ]

    func testNiceValuesMatchTheTable() throws {
        let privileged = getuid() == 0
        for (qos, nice, prefix) in Self.table {
            let (seen, name) = try observe(qos) { (currentThreadNice(), currentThreadName()) }
            let pool = ThreadPool.forQualityOfService(qos)
            XCTAssertTrue(name.hasPrefix(prefix), "\(qos): thread \(name)")
            if nice < 0 && !privileged {
                // Refused: runs at the inherited nice and says why.
                XCTAssertEqual(pool.niceError, EACCES, "\(qos)")
                XCTAssertEqual(seen, Int(pool.effectiveNice), "\(qos)")
            } else {
                XCTAssertEqual(seen, nice, "\(qos): nice seen from inside the work")
                XCTAssertEqual(Int(pool.effectiveNice), nice)
                XCTAssertNil(pool.niceError)
            }
        }
    }

    /// The same, as an unprivileged user: a child process run with `setpriv` as nobody.
    func testUnprivilegedProcessFallsBackForNegativeNice() throws {
        if ProcessInfo.processInfo.environment["SPINDLE_QOS_PROBE"] != nil {
            for (qos, _, _) in Self.table {
                let pool = ThreadPool.forQualityOfService(qos)
                let seen = try observe(qos) { currentThreadNice() }
                print("QOS \(qos.rawValue) seen=\(seen) effective=\(pool.effectiveNice) error=\(pool.niceError ?? 0)")
            }
            return
        }
        guard getuid() == 0 else { throw XCTSkip("needs root to drop to an unprivileged user") }
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv") else { throw XCTSkip("no setpriv") }
        let (status, text) = try runChild(
            "/usr/bin/setpriv",
            ["--reuid=nobody", "--regid=nogroup", "--clear-groups", CommandLine.arguments[0],
             "SpindleTests.QoSTests/testUnprivilegedProcessFallsBackForNegativeNice"],
            environment: ["SPINDLE_QOS_PROBE": "1", "PATH": "/usr/bin:/bin", "HOME": "/tmp"])
        XCTAssertEqual(status, 0, text)
        func line(_ qos: QualityOfService) -> String? {
            text.split(separator: "\n").first { $0.hasPrefix("QOS \(qos.rawValue) ") }.map(String.init)
        }
        // Negative classes: refused with EACCES, running at the inherited nice (0).
        XCTAssertEqual(line(.userInteractive), "QOS \(QualityOfService.userInteractive.rawValue) seen=0 effective=0 error=\(EACCES)", text)
        XCTAssertEqual(line(.userInitiated), "QOS \(QualityOfService.userInitiated.rawValue) seen=0 effective=0 error=\(EACCES)", text)
        // Raising nice needs no privilege.
        XCTAssertEqual(line(.utility), "QOS \(QualityOfService.utility.rawValue) seen=2 effective=2 error=0", text)
        XCTAssertEqual(line(.background), "QOS \(QualityOfService.background.rawValue) seen=10 effective=10 error=0", text)
    }

    /// With the background workers saturated by queued work, userInteractive work still
    /// starts first: it has workers of its own, and the background ones run under
    /// SCHED_IDLE, so the kernel hands them the CPU only when nobody else wants it.
    func testInteractiveWorkStartsFirstUnderBackgroundLoad() throws {
        let bg = ThreadPool.forQualityOfService(.background)
        let ui = ThreadPool.forQualityOfService(.userInteractive)
        let queued = 400
        let bgDone = Atomic<Int>(0)
        for _ in 0..<queued {
            try bg.submit {
                let end = DispatchTime.now().uptimeNanoseconds + 500_000
                while DispatchTime.now().uptimeNanoseconds < end {}
                bgDone.add(1, ordering: .relaxed)
            }
        }
        usleep(20_000)
        let seenAtStart = Mutex<[Int]>([])
        let all = DispatchSemaphore(value: 0)
        for _ in 0..<10 {
            try ui.submit {
                let n = bgDone.load(ordering: .relaxed)
                seenAtStart.locked { $0.append(n) }
                all.signal()
            }
            usleep(2_000)
        }
        for _ in 0..<10 { XCTAssertEqual(all.wait(timeout: .now() + 10), .success) }
        let seen = seenAtStart.locked { $0 }
        // 400 × 0.5 ms of queued background work is ≥ 100 ms on two CPUs; the
        // interactive tasks ran within the first ~40 ms of it.
        XCTAssertLessThan(seen.max()!, queued / 2, "interactive tasks waited behind background work: \(seen)")
        while bgDone.load(ordering: .relaxed) < queued { usleep(1000) } // background is not starved either
    }
}
