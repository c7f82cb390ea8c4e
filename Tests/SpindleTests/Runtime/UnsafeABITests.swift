import CSpindle
import Synchronization
import XCTest

@testable import Spindle

@_silgen_name("swift_retainCount")
private func swiftRetainCount(_ object: UnsafeMutableRawPointer) -> Int

/// The techniques in Runtime/UnsafeABI.swift rely on how this toolchain lays out
/// objects and passes closures. Each test here fails if a toolchain changes that.
final class UnsafeABITests: XCTestCase {
    final class Plain {}
    final class Subclassed: BlockOperation, @unchecked Sendable {
        var extra = 42
    }

    func testTheEngineTaskNodeIsTheFirstStoredPropertyOfEveryOperation() {
        // TaskNode finds the node after the object header and the operation from the
        // node by subtracting it: both must hold for every subclass, including one
        // with stored properties of its own.
        let ops: [Operation] = [Operation(), BlockOperation {}, InvocationOperation({ (x: Int) in x }, argument: 1),
                                Subclassed(), AsyncBlockOperation {}]
        for op in ops {
            let sentinel: spindle_task_fn = { _, _ in }
            op.engineTask.run = sentinel
            let node = TaskNode.node(of: op)
            XCTAssertNotNil(node.pointee.run, "the node TaskNode computes is not `engineTask` in \(type(of: op))")
            node.pointee.run = nil
            XCTAssertNil(op.engineTask.run, "the node TaskNode computes is not `engineTask` in \(type(of: op))")
            XCTAssertTrue(TaskNode.operation(of: node).takeUnretainedValue() === op,
                          "the header size is wrong for \(type(of: op))")
        }
    }

    func testTheEngineTaskNodeIsTheFirstStoredPropertyOfAnOffload() {
        let offload: OffloadBase = Offload({ 1 }, admission: nil)
        offload.engineTask.run = { _, _ in }
        let node = TaskNode.node(of: offload)
        XCTAssertNotNil(node.pointee.run, "the node TaskNode computes is not an offload's `engineTask`")
        node.pointee.run = nil
        XCTAssertNil(offload.engineTask.run)
        XCTAssertTrue(Unmanaged<OffloadBase>.fromOpaque(UnsafeRawPointer(node) - TaskNode.headerSize)
            .takeUnretainedValue() === offload, "the header size is wrong for an offload")
    }

    func testAGuaranteedReferenceIsNotRetained() {
        // The finish protocol reaches dependents that may be in their deinit through
        // `withGuaranteedReference`; a retain there would run that deinit twice.
        let object = Plain()
        let u = Unmanaged.passUnretained(object)
        let before = swiftRetainCount(u.toOpaque())
        let inside = u.withGuaranteedReference { _ in swiftRetainCount(u.toOpaque()) }
        XCTAssertEqual(inside, before, "withGuaranteedReference retained the object")
        withExtendedLifetime(object) {}
    }

    func testTheSwiftcallForkJoinPassesBothClosuresAndTheirContexts() throws {
        // `spindle_swift_fork` and `spindle_swift_join` receive the offered closure as
        // two words and call it with Swift's convention, while the other half runs in
        // Swift between them: wrong words or a wrong register would crash or mix up
        // the results. Captured state on both sides, and many forks, from outside
        // the pool and from a worker.
        let pool = try ThreadPool(workers: 2)
        let (a, b) = pool.join({ "here" + String(1) }, { "offered" + String(2) })
        XCTAssertEqual(a, "here1")
        XCTAssertEqual(b, "offered2")
        let sum = pool.run { () -> Int in
            var total = 0
            for i in 0..<1000 {
                let (x, y) = pool.join({ i * 2 }, { i * 3 })
                total += x + y
            }
            return total
        }
        XCTAssertEqual(sum, (0..<1000).reduce(0) { $0 + $1 * 5 })
        try pool.shutdown(.drain)
    }

    func testThePortableJoinRunsBothHalves() throws {
        // The fallback for a compiler without `swiftcall`, through spindle_fork and
        // spindle_join: both halves run, once, whether or not the offered one is
        // stolen, and the caller sees the offered half's writes.
        let pool = try ThreadPool(workers: 2)
        for _ in 0..<Stress.count(2000) {
            let here = Atomic<Int>(0)
            let offered = Atomic<Int>(0)
            pool.joinPortable({ here.add(1, ordering: .relaxed) }, { offered.add(1, ordering: .relaxed) })
            XCTAssertEqual(here.load(ordering: .relaxed), 1)
            XCTAssertEqual(offered.load(ordering: .relaxed), 1)
        }
        let total = pool.run { () -> Int in
            var n = 0
            pool.joinPortable({ n += 1 }, { usleep(100) })
            return n
        }
        XCTAssertEqual(total, 1)
        try pool.shutdown(.drain)
    }
}
