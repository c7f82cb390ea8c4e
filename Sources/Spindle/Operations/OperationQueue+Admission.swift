// Admission control on an OperationQueue (Spindle's addition): a queue that a server
// feeds from request handlers can say no, or make the handler wait, instead of growing
// without bound. The protocol is in Internals/QueueAdmission.swift (QA1-QA4).

extension OperationQueue {
    /// The most operations the queue holds — its ``operationCount`` — before the entry
    /// points that may refuse work do so (nil, the default: no limit). Spindle's
    /// addition.
    ///
    /// While the queue holds that many, ``tryAddOperation(_:)`` returns false, and
    /// ``run(ifFull:_:)`` waits for room, first come first served, or throws
    /// ``ThreadPool/Error/overloaded``. ``addOperation(_:)-(Operation)`` and the other
    /// Foundation methods never refuse an operation, as in Foundation; what they add
    /// counts toward the limit. Raising or removing the limit lets waiting tasks in at
    /// once.
    ///
    /// Setting a limit below 1 is a programmer error, and traps.
    public var admissionLimit: Int? {
        get { admission.limit }
        set {
            if let limit = newValue, limit < 1 {
                fatalError("OperationQueue.admissionLimit must be at least 1 (nil: no limit), got \(limit)")
            }
            if newValue != nil && admission.startObserving() {
                // Weak: a queue that is released is not kept alive by its own observer.
                onOperationCountChange { [weak self] _ in
                    guard let self else { return }
                    self.admission.countChanged { self.operationCount }
                }
            }
            admission.setLimit(newValue) { [unowned self] in operationCount }
        }
    }

    /// Adds `op` unless the queue holds ``admissionLimit`` operations or more: true when
    /// it was added, false when it was not (and is left as it was, to add later or
    /// elsewhere). Never blocks. Without a limit, it is ``addOperation(_:)-(Operation)``.
    public func tryAddOperation(_ op: Operation) -> Bool {
        // Non-escaping closures: they capture `self` without a context to allocate or an
        // unowned count to touch.
        guard admission.tryReserve(count: { operationCount }) else { return false }
        addOperation(op)
        admission.added { operationCount }
        return true
    }

    /// ``run(_:)`` on a queue with an ``admissionLimit``, choosing what happens while
    /// the queue is full: wait for room, first come first served (`.wait`, what
    /// ``run(_:)`` does), or throw ``ThreadPool/Error/overloaded`` at once (`.fail`).
    ///
    /// - Throws: what `body` throws; `CancellationError` when the calling task is
    ///   cancelled before `body` starts, including while it waits for room;
    ///   ``ThreadPool/Error/overloaded``.
    @inlinable @inline(__always)
    public func run<T: Sendable>(ifFull: ThreadPool.FullPolicy,
                                 _ body: @escaping @Sendable () throws -> T) async throws -> T {
        // Checked first here, where `ThreadPool.run` leaves an early cancellation to its
        // handler: a cancelled operation is retired only when its queue runs, so on a
        // suspended queue the handler's answer would wait for the queue to resume.
        try Task.checkCancellation()
        if !tryReserveRun() { try await reserveRun(ifFull: ifFull) }
        // Inlined into the caller down to the continuation (`awaitFinish`): each async
        // function in between would be a frame from the task's allocator and two checks
        // of the task's executor per run.
        let (op, outcome) = addRun(body)
        await withTaskCancellationHandler {
            await op.awaitFinish()
        } onCancel: {
            op.cancel()
        }
        return try outcome.take(T.self)
    }

    /// Takes a place for `run` if there is room at once (always, without a limit).
    @usableFromInline
    func tryReserveRun() -> Bool {
        // A closure that does not outlive the call: no context to allocate. Only a wait
        // in line keeps one.
        admission.tryReserve(count: { operationCount })
    }

    /// Takes a place for `run` in a full queue: waits for one, first come first served,
    /// or throws ``ThreadPool/Error/overloaded``, as `ifFull` says.
    @usableFromInline
    func reserveRun(ifFull: ThreadPool.FullPolicy) async throws {
        switch ifFull {
        case .wait: try await admission.reserve(count: { [unowned self] in operationCount })
        case .fail: throw ThreadPool.Error.overloaded
        }
    }
}
