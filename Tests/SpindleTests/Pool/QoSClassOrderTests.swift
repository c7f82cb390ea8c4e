import Dispatch
import Foundation
import Synchronization
import XCTest

@testable import Spindle

/// Every class keeps its own workers, its own policy and its own place among the
/// classes at every process nice, privileged or not (QoSPools.nices(around:)).
final class QoSClassOrderTests: XCTestCase {
    static let classes: [QualityOfService] = [.userInteractive, .userInitiated, .default, .utility, .background]

    /// Messages, logs and metrics spell a class as Swift prints it, from a table rather
    /// than by reflection: the table must agree with the printed name, every class once.
    func testEachClassIsSpelledAsSwiftPrintsIt() {
        XCTAssertEqual(QoSPools.classes, Self.classes, "the classes from the highest to the lowest")
        for qos in Self.classes {
            XCTAssertEqual(QoSPools.label(for: qos), "\(qos)")
        }
        XCTAssertEqual(Set(Self.classes.map(QoSPools.label(for:))).count, Self.classes.count)
    }

    /// The table itself, at every process nice: never out of order, the classes above
    /// default strictly above it and each other wherever the range allows, the default
    /// class at the process's own nice wherever that leaves room, and nothing outside
    /// -20...19.
    func testTheNiceTableKeepsTheClassesInOrderAtEveryProcessNice() {
        for base: Int32 in -20...19 {
            let t = QoSPools.nices(around: base) // background first
            let (bg, ut, def, initiated, ui) = (t[0], t[1], t[2], t[3], t[4])
            XCTAssertTrue(t.allSatisfy { (-20...19).contains($0) }, "\(base): \(t)")
            XCTAssertLessThan(ui, initiated, "\(base): \(t)")
            XCTAssertLessThan(initiated, def, "\(base): \(t)")
            XCTAssertLessThanOrEqual(def, ut, "\(base): \(t)")
            XCTAssertLessThanOrEqual(ut, bg, "\(base): \(t)")
            if base >= -18 { XCTAssertEqual(def, base, "the default class runs at the process's nice") }
            if base <= 17 { XCTAssertLessThan(def, ut, "\(base): \(t)") }
        }
    }

    /// At process nice 0, the values the documentation's table gives.
    func testAtNiceZeroTheClassesHaveTheDocumentedNiceValues() {
        XCTAssertEqual(QoSPools.nices(around: 0), [10, 2, 0, -2, -4]) // background first
        XCTAssertEqual(QoSTests.table.map(\.1), [-4, -2, 0, 2, 10])  // userInteractive first
    }

    /// Prints, for each class, which pool runs it and what its worker sees of itself.
    func probe() throws {
        var lines: [String] = []
        let identity = { (p: ThreadPool) in "\(UInt(bitPattern: ObjectIdentifier(p).hashValue))" }
        for qos in Self.classes {
            let pool = ThreadPool.forQualityOfService(qos)
            let seen = Mutex<String>("")
            let done = DispatchSemaphore(value: 0)
            try pool.submit {
                seen.locked { $0 = "name=\(currentThreadName().prefix(10)) policy=\(currentThreadPolicy()) nice=\(currentThreadNice())" }
                done.signal()
            }
            _ = done.wait(timeout: .now() + 60)
            let name = seen.locked { $0 }.split(separator: " ").first.map { String($0.prefix { !$0.isNumber }) } ?? ""
            let rest = seen.locked { $0 }.split(separator: " ").dropFirst().joined(separator: " ")
            lines.append("CLASS \(ClassRank.of(qos)) pool=\(identity(pool)) \(name) \(rest)")
        }
        lines.append("SHARED pool=\(identity(ThreadPool.shared))")
        for l in lines { print(l) }
    }

    struct Row: Equatable, CustomStringConvertible {
        var name: String, policy: Int, nice: Int
        var description: String { "\(name) policy=\(policy) nice=\(nice)" }
    }

    /// Runs the probe in a child at process nice `nice`, as root or as nobody; returns
    /// each class's row (userInteractive first), the pools, and the shared pool.
    func run(nice: Int, asNobody: Bool) throws -> (rows: [Row], pools: [String], shared: String, text: String) {
        let test = "SpindleTests.QoSClassOrderTests/testEveryClassHasItsOwnPoolPolicyAndPlaceAtEveryProcessNice"
        let env = ["SPINDLE_QOS_TABLE_PROBE": "1"]
        let (status, text): (Int32, String)
        if asNobody {
            (status, text) = try runTestAsNobody(test, environment: env, nice: nice)
        } else {
            let command = niceCommand(nice) + [try readableCopyOfTestBinary(), test]
            (status, text) = try runChild(command[0], Array(command.dropFirst()),
                                          environment: env.merging(["PATH": "/usr/bin:/bin", "HOME": "/tmp"]) { a, _ in a })
        }
        XCTAssertEqual(status, 0, text)
        var rows: [Row] = [], pools: [String] = [], shared = ""
        for line in text.split(separator: "\n") {
            let f = line.split(separator: " ").map(String.init)
            if f.first == "CLASS", f.count == 6 {
                pools.append(String(f[2].dropFirst(5)))
                rows.append(Row(name: f[3].replacingOccurrences(of: "name=", with: ""),
                                policy: Int(f[4].dropFirst(7)) ?? -1, nice: Int(f[5].dropFirst(5)) ?? -99))
            } else if f.first == "SHARED" {
                shared = String(f[1].dropFirst(5))
            }
        }
        return (rows, pools, shared, text)
    }

    /// The probes, at process nice −20, 0, 17, 18 and 19, as root and as nobody. Root
    /// gets each class's nice from the table; nobody cannot go below the process's nice,
    /// so the classes above it run there (and the refusal is reported by the pools).
    func testEveryClassHasItsOwnPoolPolicyAndPlaceAtEveryProcessNice() throws {
        if ProcessInfo.processInfo.environment["SPINDLE_QOS_TABLE_PROBE"] != nil { return try probe() }
        guard getuid() == 0, FileManager.default.isExecutableFile(atPath: "/usr/bin/nice") else {
            throw XCTSkip("needs root (to run at nice -20, and as nobody) and nice")
        }
        // userInteractive, userInitiated, default, utility, background.
        let table: [Int: [Int]] = [
            -20: [-20, -19, -18, -17, -10],
            0: [-4, -2, 0, 2, 10],
            17: [13, 15, 17, 19, 19],
            18: [14, 16, 18, 19, 19],
            19: [15, 17, 19, 19, 19],
        ]
        let names = ["spindle-ui", "spindle-in", "spindle-w", "spindle-ut", "spindle-bg"]
        let policies = [0, 0, 0, 3, 5] // SCHED_OTHER ×3, SCHED_BATCH, SCHED_IDLE
        for (base, nices) in table.sorted(by: { $0.key < $1.key }) {
            for nobody in [false, true] {
                let got = try run(nice: base, asNobody: nobody)
                let who = nobody ? "nobody" : "root"
                let want = (0..<5).map { i in
                    Row(name: names[i], policy: policies[i], nice: nobody ? max(nices[i], base) : nices[i])
                }
                XCTAssertEqual(got.rows, want, "at nice \(base) as \(who): \(got.text)")
                XCTAssertEqual(Set(got.pools).count, 5, "at nice \(base) as \(who), classes share a pool: \(got.text)")
                XCTAssertEqual(got.shared, got.pools.count == 5 ? got.pools[2] : "?",
                               "at nice \(base) as \(who), ThreadPool.shared is not the default class's pool")
            }
        }
    }
}
