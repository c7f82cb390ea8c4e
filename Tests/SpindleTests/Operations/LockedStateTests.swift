import Foundation
import Synchronization
import XCTest

@testable import Spindle

/// An operation's locked state (OperationState.swift, Dependents.swift): the references it
/// holds as words — its dependencies, its dependents' table, its out-of-line fields — are
/// each released once, with the operation or when they leave it, and the struct itself
/// costs nothing to destroy.
final class LockedStateTests: XCTestCase {
    /// An object whose release a test can see through a weak reference.
    private final class Tracked: Sendable {}

    private func ids(_ ops: [Operation]) -> [ObjectIdentifier] { ops.map(ObjectIdentifier.init) }

    func testTheLockedStateIsTriviallyDestroyed() {
        XCTAssertTrue(_isPOD(Operation.Guarded.self),
                      "a field of Operation.Guarded needs destroying, which every operation's deallocation pays for")
    }

    func testDependenciesKeepTheirOrderThroughRemovalsAndGoWithTheirDependent() {
        var watched: [Weak<Operation>] = []
        do {
            let deps = (0..<4).map { _ in BlockOperation {} }
            let op = BlockOperation {}
            for d in deps { op.addDependency(d) }
            op.addDependency(deps[1])
            XCTAssertEqual(ids(op.dependencies), ids(deps), "in the order added, a repeated one once")
            op.removeDependency(deps[0])
            XCTAssertEqual(ids(op.dependencies), ids([deps[1], deps[2], deps[3]]), "the second took the first's place")
            op.removeDependency(deps[2])
            XCTAssertEqual(ids(op.dependencies), ids([deps[1], deps[3]]))
            op.removeDependency(deps[1])
            XCTAssertEqual(ids(op.dependencies), ids([deps[3]]))
            op.removeDependency(deps[3])
            XCTAssertEqual(op.dependencies.count, 0)
            op.addDependency(deps[2])
            op.addDependency(deps[0])
            XCTAssertEqual(ids(op.dependencies), ids([deps[2], deps[0]]))
            XCTAssertFalse(op.isReady)
            deps[2].start()
            deps[0].start()
            XCTAssertTrue(op.isReady, "both dependencies left in the list counted it down")
            watched = deps.map { Weak<Operation>($0) } + [Weak<Operation>(op)]
        }
        for (i, w) in watched.enumerated() { XCTAssertNil(w.value, "operation \(i) was freed") }
    }

    /// The table of `op`'s dependents, if it has one, watched weakly.
    private func dependentsTable(of op: Operation) -> Weak<Dependents.Table>? {
        op.guarded.locked { g -> Weak<Dependents.Table>? in
            if case .many(let table) = g.dependents { return Weak(table.takeUnretainedValue()) }
            return nil
        }
    }

    func testAnOperationWithManyDependentsTellsThoseLeftAndIsFreed() {
        let ran = Atomic<Int>(0)
        var watched: [Weak<Operation>] = []
        do {
            let target = BlockOperation {}
            var dependents = (0..<5).map { _ in BlockOperation {} }
            for d in dependents { d.addDependency(target) }
            let firstTable = dependentsTable(of: target)
            XCTAssertNotNil(firstTable)
            // One leaves by being freed, which takes it off the target's table; the
            // others by removing the edge; then the table empties and fills again.
            dependents.removeLast()
            dependents[0].removeDependency(target)
            XCTAssertTrue(dependents[0].isReady)
            dependents[1].removeDependency(target)
            dependents[2].removeDependency(target)
            dependents[3].removeDependency(target)
            XCTAssertNil(firstTable?.value, "the emptied table was released")
            dependents[2].addDependency(target)
            dependents[3].addDependency(target)
            let secondTable = dependentsTable(of: target)
            XCTAssertNotNil(secondTable)
            target.start()
            XCTAssertNil(secondTable?.value, "the finish released the table")
            for d in dependents {
                XCTAssertTrue(d.isReady)
                d.start()
                if d.isFinished { ran.add(1, ordering: .relaxed) }
            }
            XCTAssertEqual(ran.load(ordering: .relaxed), 4)
            watched = dependents.map { Weak<Operation>($0) } + [Weak<Operation>(target)]
        }
        for (i, w) in watched.enumerated() { XCTAssertNil(w.value, "operation \(i) was freed") }
    }

    /// Attaches a tracked object to an operation with `attach`, drops the operation, and
    /// checks that both were freed.
    private func assertReleasedWithItsOperation(_ what: String, file: StaticString = #filePath, line: UInt = #line,
                                                _ attach: (BlockOperation, Tracked) -> Void) {
        let tracked: Weak<Tracked>, op: Weak<BlockOperation>
        do {
            let t = Tracked(), o = BlockOperation {}
            attach(o, t)
            tracked = Weak(t)
            op = Weak(o)
        }
        XCTAssertNil(op.value, "the operation was freed", file: file, line: line)
        XCTAssertNil(tracked.value, "\(what) was released with its operation", file: file, line: line)
    }

    func testTheOutOfLineFieldsGoWithTheirOperation() {
        assertReleasedWithItsOperation("an observer, kept with the out-of-line fields,") { o, t in
            o.name = "named"
            o.onStateChange { _ in withExtendedLifetime(t) {} }
            XCTAssertEqual(o.name, "named")
        }
    }

    func testACompletionBlockThatNeverRanGoesWithItsOperation() {
        assertReleasedWithItsOperation("the completion block") { o, t in
            o.completionBlock = { withExtendedLifetime(t) {} }
            XCTAssertNotNil(o.completionBlock)
        }
    }
}
