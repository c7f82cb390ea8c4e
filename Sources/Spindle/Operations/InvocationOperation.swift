import Synchronization

/// Errors reading ``InvocationOperation/result``.
public enum InvocationOperationError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The operation was cancelled before it ran (Foundation's
    /// NSInvocationOperationCancelledException).
    case cancelled
    /// The invoked function returns no value (NSInvocationOperationVoidResultException).
    case voidResult
    /// The operation has not finished yet.
    case notFinished

    /// A sentence naming the problem.
    public var description: String {
        switch self {
        case .cancelled: return "the invocation operation was cancelled, so it has no result"
        case .voidResult: return "the invoked function returns no value"
        case .notFinished: return "the invocation operation has not finished"
        }
    }
}

/// An operation that calls one function or method with an argument and keeps what it
/// returned — the Swift form of Foundation's `NSInvocationOperation`, which needs the
/// Objective-C runtime.
///
/// ```swift
/// let op = InvocationOperation(parse, argument: data)
/// queue.addOperation(op)
/// op.waitUntilFinished()
/// let doc = try op.result(as: Document.self)
/// ```
open class InvocationOperation: Operation, @unchecked Sendable {
    private let invoke: @Sendable () throws -> Any
    private let returnsVoid: Bool
    // The value is handed from the running thread to readers once, after `isFinished`.
    private let outcome = Mutex<UncheckedSendableBox<Result<Any, Error>>?>(nil)

    /// Calls `function(argument)` when the operation runs.
    public init<Argument, Output>(_ function: @escaping @Sendable (Argument) throws -> Output, argument: Argument) {
        // Boxed: Foundation's invocation operation takes any argument; only the thread
        // that runs the operation uses it, once.
        let arg = UncheckedSendableBox(argument)
        invoke = { try function(arg.value) }
        returnsVoid = Output.self == Void.self
    }

    /// Calls `method(target)(argument)` when the operation runs — the counterpart of
    /// `init(target:selector:object:)`. The target is retained until the operation is
    /// released.
    public init<Target: AnyObject, Argument, Output>(
        target: Target, method: @escaping (Target) -> (Argument) throws -> Output, object argument: Argument
    ) {
        // Boxed, as above: used only by the thread that runs the operation.
        let box = UncheckedSendableBox((target, method, argument))
        invoke = { try box.value.1(box.value.0)(box.value.2) }
        returnsVoid = Output.self == Void.self
    }

    /// Calls the function and keeps its result (or the error it threw) for ``result``.
    open override func main() {
        let r: Result<Any, Error>
        do { r = .success(try invoke()) } catch { r = .failure(error) }
        // Boxed: written here and read by `result`, both under `outcome`'s lock.
        let boxed = UncheckedSendableBox(r)
        outcome.locked { $0 = boxed }
    }

    /// What the invocation returned. Throws ``InvocationOperationError/cancelled`` if
    /// the operation was cancelled before it ran, ``InvocationOperationError/voidResult``
    /// if the function returns nothing, ``InvocationOperationError/notFinished`` before
    /// it has finished, and rethrows what the invocation threw.
    open var result: Any {
        get throws {
            guard isFinished else { throw InvocationOperationError.notFinished }
            guard let r = outcome.locked({ $0 })?.value else {
                throw isCancelled ? InvocationOperationError.cancelled : InvocationOperationError.notFinished
            }
            let value = try r.get()
            if returnsVoid { throw InvocationOperationError.voidResult }
            return value
        }
    }

    /// ``result``, cast to `T` (traps when `T` is not the function's return type).
    public func result<T>(as type: T.Type) throws -> T {
        let v = try result
        guard let t = v as? T else { fatalError("InvocationOperation.result(as:): the result is a \(Swift.type(of: v)), not a \(T.self)") }
        return t
    }
}
