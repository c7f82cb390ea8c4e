import CSpindle
import CSpindleTesting
import Foundation
import Logging
import Synchronization
import XCTest

@testable import Spindle

/// A swift-log handler that keeps what it is given.
struct CapturingLogHandler: LogHandler {
    final class Store: Sendable {
        let entries = Mutex<[(level: Logger.Level, message: String, metadata: Logger.Metadata)]>([])
    }
    let store: Store
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .trace

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        let all = metadata.merging(event.metadata ?? [:]) { $1 }
        store.entries.locked { $0.append((event.level, "\(event.message)", all)) }
    }
}

final class LoggingTests: XCTestCase {
    func testTheEnginesMessagesGoToTheProcessWideLogger() {
        let store = CapturingLogHandler.Store()
        let saved = ThreadPool.logger
        ThreadPool.logger = Logger(label: "test") { _ in CapturingLogHandler(store: store) }
        defer { ThreadPool.logger = saved }
        spindle_test_log(SPINDLE_LOG_NOTICE, "a note")
        spindle_test_log(SPINDLE_LOG_ERROR, "an error")
        let entries = store.entries.locked { $0 }
        XCTAssertEqual(entries.map(\.message), ["a note", "an error"])
        XCTAssertEqual(entries.map(\.level), [.notice, .error])
    }

    /// A pool of one's own reports a refused nice to its configured logger, naming the
    /// pool. Run in an unprivileged child, where a negative nice is refused and the
    /// workers keep the nice the child inherits from this process.
    func testAPoolReportsWhatTheKernelRefusedToItsLogger() throws {
        if ProcessInfo.processInfo.environment["SPINDLE_LOG_PROBE"] != nil {
            let store = CapturingLogHandler.Store()
            var c = ThreadPool.Configuration(workers: 1)
            c.nice = -5
            c.name = "probe-w"
            c.logger = Logger(label: "probe") { _ in CapturingLogHandler(store: store) }
            let pool = try ThreadPool(configuration: c)
            for e in store.entries.locked({ $0 }) {
                print("LOG \(e.level) pool=\(e.metadata["spindle.pool"].map { "\($0)" } ?? "-") \(e.message)")
            }
            try pool.shutdown()
            return
        }
        let (status, text) = try runTestAsNobody(
            "SpindleTests.LoggingTests/testAPoolReportsWhatTheKernelRefusedToItsLogger",
            environment: ["SPINDLE_LOG_PROBE": "1"])
        XCTAssertEqual(status, 0, text)
        let logs = text.split(separator: "\n").filter { $0.hasPrefix("LOG ") }
        XCTAssertEqual(logs.count, 1, text)
        XCTAssertTrue(logs.first?.hasPrefix("LOG warning pool=probe-w nice 0 kept instead of the configured one (errno \(EACCES))") ?? false, text)
    }
}
