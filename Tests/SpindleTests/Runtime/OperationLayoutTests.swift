@_spi(Reflection) import Swift
import XCTest

@testable import Spindle

/// An operation's stored properties are ordered so that what a worker writes while it
/// runs one sits together, right after the engine node (see the layout note in
/// Operation.swift): the adding thread makes the next operation in the memory of one
/// it freed, and every cache line a worker wrote comes back to it.
final class OperationLayoutTests: XCTestCase {
    /// The offset of each stored property `Operation` declares, by name.
    private func offsets() -> [String: Int] {
        var found: [String: Int] = [:]
        // `_EachFieldOptions.classType`, spelled by its raw value: the option is a
        // mutable static, which strict concurrency refuses to read.
        _ = _forEachField(of: Operation.self, options: _EachFieldOptions(rawValue: 1 << 0)) { name, offset, _, _ in
            found[String(cString: name)] = offset
            return true
        }
        return found
    }

    func testWhatAWorkerWritesSitsWithinFortyEightBytesOfTheNode() throws {
        let at = offsets()
        let node = try XCTUnwrap(at["engineTask"], "Operation has no stored property `engineTask`")
        // What a worker writes, and how many bytes of it: the node's link, the phase
        // and finish flags, the run word, and `queueSync`'s first bytes (`done` and
        // `runState` follow `readySignalled` there).
        let written: [(String, Int)] = [("engineTask", 8), ("phase", 1), ("finishHandled", 1), ("finishCompleted", 1),
                                        ("startedByQueue", 1), ("execWord", 8), ("queueSync", 3)]
        var end = node
        for (name, bytes) in written {
            let offset = try XCTUnwrap(at[name], "Operation has no stored property `\(name)`")
            XCTAssertGreaterThanOrEqual(offset, node, "`\(name)` comes before the engine node")
            end = max(end, offset + bytes)
        }
        XCTAssertLessThanOrEqual(end - node, 48,
                                 "what a worker writes spans \(end - node) bytes from the engine node: \(at.sorted { $0.value < $1.value })")
    }
}
