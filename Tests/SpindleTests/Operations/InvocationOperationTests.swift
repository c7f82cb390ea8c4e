import CSpindle
import Synchronization
import XCTest

@testable import Spindle

final class InvocationOperationTests: XCTestCase {
    // MARK: InvocationOperation

    func testInvocationOperationResults() throws {
        struct Parse: Error, Equatable {}
        let q = OperationQueue()
        let ok = InvocationOperation({ (s: String) in s.count }, argument: "spindle")
        let void = InvocationOperation({ (_: Int) in }, argument: 1)
        let failing = InvocationOperation({ (_: Int) throws -> Int in throw Parse() }, argument: 1)
        let cancelled = InvocationOperation({ (x: Int) in x }, argument: 1)
        final class Target { func twice(_ x: Int) -> Int { 2 * x } }
        let method = InvocationOperation(target: Target(), method: Target.twice, object: 21)
        XCTAssertThrowsError(try ok.result) { XCTAssertEqual($0 as? InvocationOperationError, .notFinished) }
        cancelled.cancel()
        q.addOperations([ok, void, failing, cancelled, method], waitUntilFinished: true)
        XCTAssertEqual(try ok.result(as: Int.self), 7)
        XCTAssertEqual(try method.result(as: Int.self), 42)
        XCTAssertThrowsError(try void.result) { XCTAssertEqual($0 as? InvocationOperationError, .voidResult) }
        XCTAssertThrowsError(try failing.result) { XCTAssertEqual($0 as? Parse, Parse()) }
        XCTAssertThrowsError(try cancelled.result) { XCTAssertEqual($0 as? InvocationOperationError, .cancelled) }
    }

    func testQueueNamesAreUniqueByDefault() {
        let a = OperationQueue(), b = OperationQueue()
        XCTAssertNotNil(a.name)
        XCTAssertNotEqual(a.name, b.name)
    }

    func testThreadPriorityMapsToNearestClassWhenNoQoSIsSet() {
        let op = BlockOperation {}
        op.threadPriority = 0.1
        XCTAssertEqual(op.effectiveQoS(queueDefault: .default), .background)
        op.threadPriority = 0.9
        XCTAssertEqual(op.effectiveQoS(queueDefault: .default), .userInteractive)
        op.qualityOfService = .utility
        XCTAssertEqual(op.effectiveQoS(queueDefault: .default), .utility, "an explicit QoS wins")
    }
}
