import Foundation
import XCTest

@testable import Spindle

/// Out-of-range configuration is refused with `invalidConfiguration`, naming the field;
/// nothing in the checks themselves may trap.
final class ConfigurationTests: XCTestCase {
    func expectInvalid(_ field: String, _ change: (inout ThreadPool.Configuration) -> Void,
                       file: StaticString = #filePath, line: UInt = #line) {
        var config = ThreadPool.Configuration(workers: 1)
        change(&config)
        XCTAssertThrowsError(try ThreadPool(configuration: config), file: file, line: line) { error in
            guard case ThreadPool.Error.invalidConfiguration(let why) = error else {
                return XCTFail("\(error)", file: file, line: line)
            }
            XCTAssertTrue(why.contains(field), why, file: file, line: line)
        }
    }

    func testOversizedAndNegativeDurationsAreRefusedNotTrapped() {
        let huge = Duration.seconds(Int64.max / 2)
        let negative = Duration.seconds(-Int64.max / 2)
        expectInvalid("spin") { $0.spin = huge }
        expectInvalid("spin") { $0.spin = negative }
        expectInvalid("timeSlice") { $0.timeSlice = huge }
        expectInvalid("timeSlice") { $0.timeSlice = negative }
        expectInvalid("spareIdleTimeout") { $0.spareIdleTimeout = negative }
        expectInvalid("spareIdleTimeout") { $0.spareIdleTimeout = .zero }
    }

    func testWholeNanosecondsSaturates() {
        XCTAssertEqual(Duration.seconds(Int64.max / 2).wholeNanoseconds, Int64.max)
        XCTAssertEqual(Duration.seconds(-Int64.max / 2).wholeNanoseconds, Int64.min)
        XCTAssertEqual(Duration.milliseconds(1500).wholeNanoseconds, 1_500_000_000)
    }

    func testSpareWorkerLimitsAreChecked() {
        expectInvalid("maxSpareWorkers") { $0.maxSpareWorkers = -1 }
        expectInvalid("maxSpareWorkers") { $0.maxSpareWorkers = 5000 }
    }
}
