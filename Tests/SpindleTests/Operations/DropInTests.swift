import class Foundation.NSLock
import Synchronization
import XCTest

// A plain import, not `@testable`: this file sees only Spindle's public API, as a user's
// code does — and whether a subclass may leave out `super.init()`, or inherits
// `init(block:)`, depends on which initialisers it can see.
import Spindle

// Subclasses in the shapes code written for Foundation uses. Each compiles against
// Foundation's types; if one of Spindle's types stops accepting it, this file stops
// compiling and the suite fails.

/// Its own designated initialiser, no `super.init()`: Swift calls it implicitly only when
/// the superclass has exactly one designated initialiser (Foundation's BlockOperation
/// does: `init(block:)` is a convenience initialiser there).
private final class TaggedBlockOperation: BlockOperation, @unchecked Sendable {
    let tag: Int
    init(tag: Int) { self.tag = tag }
}

/// No initialiser of its own: inherits `init()` and, through it, `init(block:)`.
private class PlainBlockSubclass: BlockOperation, @unchecked Sendable {}

/// The same shape on Operation.
private final class TaggedOperation: Operation, @unchecked Sendable {
    let tag: Int
    private let ran = Atomic<Bool>(false)
    var didRun: Bool { ran.load(ordering: .acquiring) }
    init(tag: Int) { self.tag = tag }
    override func main() { ran.store(true, ordering: .releasing) }
}

/// And on OperationQueue.
private final class NamedQueue: OperationQueue, @unchecked Sendable {
    let label: String
    init(label: String) { self.label = label }
}

final class DropInTests: XCTestCase {
    func testFoundationShapedSubclassesCompileAndRun() {
        let queue = NamedQueue(label: "drop-in")
        let blocksRun = Atomic<Int>(0)
        let tagged = TaggedBlockOperation(tag: 7)
        tagged.addExecutionBlock { blocksRun.add(1, ordering: .relaxed) }
        let inherited = PlainBlockSubclass(block: { blocksRun.add(1, ordering: .relaxed) })
        let op = TaggedOperation(tag: 3)
        queue.addOperations([tagged, inherited, op], waitUntilFinished: true)
        XCTAssertEqual(blocksRun.load(ordering: .relaxed), 2)
        XCTAssertTrue(op.didRun)
        XCTAssertEqual(tagged.executionBlocks.count, 1)
        XCTAssertEqual(inherited.executionBlocks.count, 1, "init(block:) inherited through init()")
        XCTAssertEqual([tagged.tag, op.tag], [7, 3])
        XCTAssertEqual(queue.label, "drop-in")
        XCTAssertTrue(tagged.isFinished && inherited.isFinished && op.isFinished)
    }

    /// Foundation's operations and queues are NSObjects: equatable and hashable by
    /// identity (`isEqual`, overridable), printable. Code relying on that — the common
    /// `OperationQueue.current == OperationQueue.main` check among it — compiles and
    /// behaves the same.
    func testOperationsAndQueuesAreHashableAndPrintableLikeNSObjects() {
        let queue = OperationQueue()
        queue.isSuspended = true
        let a = BlockOperation {}, b = BlockOperation {}
        queue.addOperation(a)
        XCTAssertTrue(queue.operations.contains(a))
        XCTAssertFalse(queue.operations.contains(b))
        XCTAssertEqual(queue.operations.firstIndex(of: a), 0)
        XCTAssertEqual(Set<Operation>([a, a, b]).count, 2)
        XCTAssertTrue(a == a && a != b)
        XCTAssertTrue(a.isEqual(a) && !a.isEqual(b) && !a.isEqual(nil) && !a.isEqual(queue))
        XCTAssertEqual(OperationQueue.current == OperationQueue.main, Thread.isMainThread)
        XCTAssertTrue(queue != OperationQueue.main && queue == queue)
        XCTAssertEqual(Set([queue, queue, OperationQueue.main]).count, 2)
        XCTAssertTrue(a.description.hasPrefix("<BlockOperation: 0x"), a.description)
        XCTAssertTrue(queue.description.hasPrefix("<OperationQueue: 0x"), queue.description)
        // isEqual is what == asks, so an override is honoured.
        XCTAssertTrue(SameKind(kind: 1) == SameKind(kind: 1))
        XCTAssertFalse(SameKind(kind: 1) == SameKind(kind: 2))
        a.cancel()
        queue.isSuspended = false
        queue.waitUntilAllOperationsAreFinished()
    }

    /// A custom asynchronous operation that signals with `willChangeValue(for:)` /
    /// `didChangeValue(for:)` finishes in its queue and releases its dependents, as one
    /// using the string keys does.
    func testKeyPathChangeNotificationsDriveTheStateMachine() {
        let queue = OperationQueue()
        let async = KeyPathSignallingOperation()
        let after = Atomic<Bool>(false)
        let dependent = BlockOperation { after.store(async.isFinished, ordering: .releasing) }
        dependent.addDependency(async)
        let done = DispatchSemaphore(value: 0)
        dependent.completionBlock = { done.signal() }
        queue.addOperations([async, dependent], waitUntilFinished: false)
        // Not waitUntilFinished: a notification the queue missed would hang the suite.
        guard done.wait(timeout: .now() + 60) == .success else {
            return XCTFail("the queue never saw the operation finish")
        }
        queue.waitUntilAllOperationsAreFinished()
        XCTAssertTrue(async.isFinished && !async.isExecuting)
        XCTAssertTrue(after.load(ordering: .acquiring), "the dependent ran after the operation finished")
        XCTAssertEqual(queue.operationCount, 0)
    }
}

/// The concurrent-operation template of Apple's Operation Queues guide, signalling with the key-path spelling of
/// KVO's notifications (`willChangeValue(for: \.isFinished)`), as Swift code written for
/// Foundation may.
private final class KeyPathSignallingOperation: Operation, @unchecked Sendable {
    // NSLock, not Synchronization's Mutex: Mutex locks inside a library built without
    // ThreadSanitizer, so under `--sanitize=thread` a contended Mutex looks like no lock
    // at all; NSLock is a pthread mutex, which TSan intercepts.
    private let lock = NSLock()
    private var state = (executing: false, finished: false)
    override var isAsynchronous: Bool { true }
    override var isExecuting: Bool { lock.withLock { state.executing } }
    override var isFinished: Bool { lock.withLock { state.finished } }
    override func start() {
        willChangeValue(for: \.isExecuting)
        lock.withLock { state.executing = true }
        didChangeValue(for: \.isExecuting)
        DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(20)) {
            self.willChangeValue(for: \.isFinished)
            self.willChangeValue(for: \.isExecuting)
            self.lock.withLock { self.state = (executing: false, finished: true) }
            self.didChangeValue(for: \.isExecuting)
            self.didChangeValue(for: \.isFinished)
        }
    }
}

/// An operation that overrides NSObject-style equality.
private final class SameKind: Operation, @unchecked Sendable {
    let kind: Int
    init(kind: Int) { self.kind = kind }
    override func isEqual(_ object: Any?) -> Bool { (object as? SameKind)?.kind == kind }
    override var hash: Int { kind }
}
