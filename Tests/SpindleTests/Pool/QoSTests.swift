import CSpindle
import Foundation
import Synchronization
import XCTest

@testable import Spindle

/// Quality-of-service classes as real Linux priorities, observed from inside the work.
final class QoSTests: XCTestCase {
    /// How long to wait for work of any class, the background one included: a busy
    /// machine may keep a SCHED_IDLE thread off the CPU for tens of seconds.
    static let patience: Double = 300

    /// Runs `body` on the worker set of `qos` and returns what it saw.
    func observe<T: Sendable>(_ qos: QualityOfService, _ body: @escaping @Sendable () -> T) throws -> T {
        let out = Mutex<T?>(nil)
        let done = DispatchSemaphore(value: 0)
        try ThreadPool.forQualityOfService(qos).submit {
            let v = body()
            out.locked { $0 = v }
            done.signal()
        }
        XCTAssertEqual(done.wait(timeout: .now() + Self.patience), .success, "the \(qos) work did not run")
        return try XCTUnwrap(out.locked { $0 }, "the \(qos) work did not run")
    }

    static let table: [(QualityOfService, Int, String)] = [
        (.userInteractive, -4, "spindle-ui"), (.userInitiated, -2, "spindle-in"), (.default, 0, "spindle-w"),
        (.utility, 2, "spindle-ut"), (.background, 10, "spindle-bg"),
    ]

    /// The table's nice values are offsets from the process's nice (0 unless the suite
    /// runs niced; `QoSClassOrderTests` checks the table at 0).
    func testNiceValuesMatchTheTable() throws {
        let privileged = getuid() == 0
        for (qos, _, prefix) in Self.table {
            let nice = classNice(qos)
            let (seen, name) = try observe(qos) { (currentThreadNice(), currentThreadName()) }
            let pool = ThreadPool.forQualityOfService(qos)
            XCTAssertTrue(name.hasPrefix(prefix), "\(qos): thread \(name)")
            if nice < Int(QoSPools.processNice) && !privileged {
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

    /// Runs the probe of ``testUnprivilegedProcessFallsBackForNegativeNice`` in a child
    /// process as `nobody` (with `setpriv`), at process nice `nice`: its output, its line
    /// for each class, and the refusal reports it printed.
    func probeAsNobody(nice: Int = 0) throws
        -> (text: String, line: (QualityOfService) -> String?, refusals: [String]) {
        let (status, text) = try runTestAsNobody("SpindleTests.QoSTests/testUnprivilegedProcessFallsBackForNegativeNice",
                                                 environment: ["SPINDLE_QOS_PROBE": "1"], nice: nice)
        XCTAssertEqual(status, 0, text)
        let lines = text.split(separator: "\n").map(String.init)
        return (text, { qos in lines.first { $0.hasPrefix("QOS \(qos.rawValue) ") } },
                lines.filter { $0.contains("was refused") })
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
        let probe = try probeAsNobody()
        let (text, line, said) = (probe.text, probe.line, probe.refusals)
        // Negative classes: refused with EACCES, running at the inherited nice (0).
        XCTAssertEqual(line(.userInteractive), "QOS \(QualityOfService.userInteractive.rawValue) seen=0 effective=0 error=\(EACCES)", text)
        XCTAssertEqual(line(.userInitiated), "QOS \(QualityOfService.userInitiated.rawValue) seen=0 effective=0 error=\(EACCES)", text)
        // Raising nice needs no privilege.
        XCTAssertEqual(line(.utility), "QOS \(QualityOfService.utility.rawValue) seen=2 effective=2 error=0", text)
        XCTAssertEqual(line(.background), "QOS \(QualityOfService.background.rawValue) seen=10 effective=10 error=0", text)
        // Said once, to the process-wide logger, for the first class refused.
        XCTAssertEqual(said.count, 1, text)
        XCTAssertTrue(said.first?.contains("nice -4 for spindle-ui workers (userInteractive) was refused (EACCES") ?? false, text)
        XCTAssertTrue(said.first?.hasSuffix("the classes run at nice: userInteractive 0, userInitiated 0, default 0, utility 2, background 10") ?? false, text)
    }

    /// A process started with `nice -n 15`, unprivileged: the classes keep their order
    /// around 15 (those below it refused), and the report says what each runs at.
    func testUnprivilegedNicedProcessKeepsItsClassesApart() throws {
        let probe = try probeAsNobody(nice: 15)
        let text = probe.text
        func seen(_ qos: QualityOfService) -> String? {
            probe.line(qos).flatMap { $0.split(separator: " ").first { $0.hasPrefix("seen=") } }.map(String.init)
        }
        XCTAssertEqual(seen(.userInteractive), "seen=15", text)
        XCTAssertEqual(seen(.userInitiated), "seen=15", text)
        XCTAssertEqual(seen(.default), "seen=15", text)
        XCTAssertEqual(seen(.utility), "seen=17", text)
        XCTAssertEqual(seen(.background), "seen=19", text)
        let said = probe.refusals
        XCTAssertEqual(said.count, 1, text)
        XCTAssertTrue(said.first?.hasSuffix("the classes run at nice: userInteractive 15, userInitiated 15, default 15, utility 17, background 19") ?? false, text)
    }

    /// Class pools are created on first use, often from inside other classes' work. The
    /// userInteractive pool first used by a background operation (SCHED_IDLE, nice +10),
    /// and the default and utility pools first used by an interactive one (whose worker
    /// is pinned to one CPU), must still run at their own class on every CPU: their
    /// workers start from the process's priority, not their creator's (spawn.c), and
    /// they are planned for the CPUs of their creator's pool, not of its worker
    /// (affinity.c, "Whose CPUs"). Otherwise they would run under SCHED_IDLE
    /// (unprivileged, at +10 too), and the default pool would have one worker. A child
    /// process, so that the class pools are new; run as root and as nobody.
    func testClassPoolsFirstUsedFromBackgroundWorkRunAtTheirOwnClass() throws {
        if ProcessInfo.processInfo.environment["SPINDLE_QOS_CREATOR_PROBE"] != nil {
            let lines = Mutex<[String]>([])
            @Sendable func create(_ qos: QualityOfService, then next: @escaping @Sendable () -> Void = {}) {
                let pool = ThreadPool.forQualityOfService(qos) // created here
                let seen = DispatchSemaphore(value: 0)
                try? pool.submit {
                    let line = "QOS \(qos.rawValue) policy=\(currentThreadPolicy()) nice=\(currentThreadNice()) "
                        + "error=\(pool.niceError ?? 0) workers=\(pool.workerCount)"
                    lines.locked { $0.append(line) }
                    next()
                    seen.signal()
                }
                _ = seen.wait(timeout: .now() + Self.patience)
            }
            _ = try observe(.background) {
                lines.locked { $0.append("creator policy=\(currentThreadPolicy()) nice=\(currentThreadNice())") }
                create(.userInteractive) { create(.default); create(.utility) }
                return 0
            }
            for l in lines.locked({ $0 }) { print(l) }
            return
        }
        guard getuid() == 0 else { throw XCTSkip("needs root to run the probe as root and as nobody") }
        let me = CommandLine.arguments[0], test = "SpindleTests.QoSTests/testClassPoolsFirstUsedFromBackgroundWorkRunAtTheirOwnClass"
        let env = ["SPINDLE_QOS_CREATOR_PROBE": "1", "PATH": "/usr/bin:/bin", "HOME": "/tmp"]
        // At nice 0, whatever the suite's own.
        let command = niceCommand(0) + [me, test]
        var runs = [("root", try runChild(command[0], Array(command.dropFirst()), environment: env))]
        if FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv") {
            runs.append(("nobody", try runTestAsNobody(test, environment: env)))
        }
        for (who, (status, text)) in runs {
            XCTAssertEqual(status, 0, text)
            XCTAssertEqual(text.contains("was refused"), who == "nobody", "a refused nice is said once, and only then: \(text)")
            let got = text.split(separator: "\n").filter { $0.hasPrefix("creator ") || $0.hasPrefix("QOS ") }.map(String.init)
            let ui = who == "root" ? "nice=-4 error=0" : "nice=0 error=\(EACCES)"
            let cpus = spindle_usable_cpu_count()
            XCTAssertEqual(got, [
                "creator policy=5 nice=10",
                "QOS \(QualityOfService.userInteractive.rawValue) policy=0 \(ui) workers=\(cpus)",
                "QOS \(QualityOfService.default.rawValue) policy=0 nice=0 error=0 workers=\(cpus)",
                "QOS \(QualityOfService.utility.rawValue) policy=3 nice=2 error=0 workers=\(cpus)",
            ], "as \(who): \(text)")
        }
    }

    /// With the background workers saturated by queued work, userInteractive work still
    /// starts first: it has workers of its own, and the background ones run under
    /// SCHED_IDLE, so the kernel hands them the CPU only when nobody else wants it.
    ///
    /// The background work spins until the interactive work has run, so it saturates
    /// its workers for as long as the test lasts, however fast or busy the machine is:
    /// interactive work that waited behind it would never run, and the wait for it
    /// would end at its deadline, as a failure.
    func testInteractiveWorkStartsFirstUnderBackgroundLoad() throws {
        let bg = ThreadPool.forQualityOfService(.background)
        let ui = ThreadPool.forQualityOfService(.userInteractive)
        let queued = 400
        let release = Atomic<Bool>(false)
        let bgDone = Atomic<Int>(0)
        for _ in 0..<queued {
            try bg.submit {
                while !release.load(ordering: .acquiring) {}
                bgDone.add(1, ordering: .relaxed)
            }
        }
        let all = DispatchSemaphore(value: 0)
        for _ in 0..<10 { try ui.submit { all.signal() } }
        var ran = 0
        while ran < 10, all.wait(timeout: .now() + 60) == .success { ran += 1 }
        release.store(true, ordering: .releasing)
        XCTAssertEqual(ran, 10, "interactive tasks waited behind background work")
        // The background work is not lost either: it drains once released.
        XCTAssertTrue(eventually(within: 300) { bgDone.load(ordering: .relaxed) == queued },
                      "\(bgDone.load(ordering: .relaxed)) of \(queued) background tasks ran")
    }

    /// The other half of the bullet above: background work is delayed by higher classes,
    /// never starved forever. Every CPU is kept busy by userInteractive work (two lanes
    /// of 1 ms chunks per worker, resubmitting themselves) while a background chain of
    /// short tasks waits; SCHED_IDLE's share must still let it run. On our VMs it gets
    /// one slice (~4 ms of work) every 2–3 s under this load; the deadline is generous
    /// because the bound is the kernel's, not ours.
    func testBackgroundWorkProgressesUnderInteractiveSaturation() throws {
        let bg = ThreadPool.forQualityOfService(.background)
        let ui = ThreadPool.forQualityOfService(.userInteractive)
        let stop = Atomic<Bool>(false)
        let bgRuns = Atomic<Int>(0)
        let lanes = Atomic<Int>(0)
        let uiWorkersBusy = Mutex<Set<Int>>([]) // the userInteractive workers that have started a chunk
        @Sendable func spin(_ ns: UInt64) {
            let end = DispatchTime.now().uptimeNanoseconds + ns
            while DispatchTime.now().uptimeNanoseconds < end {}
        }
        @Sendable func bgChunk() {
            spin(20_000)
            bgRuns.add(1, ordering: .relaxed)
            if stop.load(ordering: .acquiring) { lanes.subtract(1, ordering: .relaxed) } else { try? bg.submit(bgChunk) }
        }
        @Sendable func uiChunk() {
            if let i = ui.currentWorkerIndex { _ = uiWorkersBusy.locked { $0.insert(i) } }
            spin(1_000_000)
            if stop.load(ordering: .acquiring) { lanes.subtract(1, ordering: .relaxed) } else { try? ui.submit(uiChunk) }
        }
        lanes.add(2 + 2 * ui.workerCount, ordering: .relaxed)
        for _ in 0..<2 { try bg.submit(bgChunk) }
        for _ in 0..<(2 * ui.workerCount) { try ui.submit(uiChunk) }
        defer {
            stop.store(true, ordering: .releasing)
            let deadline = DispatchTime.now().uptimeNanoseconds + 30_000_000_000
            while lanes.load(ordering: .relaxed) > 0 && DispatchTime.now().uptimeNanoseconds < deadline { usleep(1000) }
            XCTAssertEqual(lanes.load(ordering: .relaxed), 0, "the load did not stop")
        }
        // The interactive load holds every CPU once each of its workers runs a chunk (each
        // active one: under a CPU limit the others sleep).
        XCTAssertTrue(eventually { uiWorkersBusy.locked { $0.count } == ui.activeWorkerCount },
                      "the interactive workers did not all start")
        let before = bgRuns.load(ordering: .relaxed)
        let start = DispatchTime.now().uptimeNanoseconds
        let deadline = start + 20_000_000_000
        while bgRuns.load(ordering: .relaxed) == before && DispatchTime.now().uptimeNanoseconds < deadline { usleep(1000) }
        let waited = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e6
        XCTAssertGreaterThan(bgRuns.load(ordering: .relaxed), before, "background work made no progress in \(waited) ms of interactive saturation")
        print("QoSTests: background progressed after \(Int(waited)) ms of interactive saturation")
    }
}
