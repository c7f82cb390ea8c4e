// Where an operation waits in its queue, and which worker set runs it.
//
// Two priorities, as in Foundation. `queuePriority` orders the ready operations of one
// queue (a line per level, each in the order its operations were added:
// ReadyRings.swift); until it is assigned, an operation on a queue that is not serial
// takes the level Foundation derives from its quality of service. A barrier waits on a
// level of its own above veryHigh, as in Foundation: once the operations before it
// have finished, it starts ahead of any other ready operation (a cancelled one added
// after it). `qualityOfService` (or the older `threadPriority`) picks the pool the
// operation runs on: one worker set per class, at the class's nice value
// (Pool/QoSPools.swift). `ClassRank` numbers the classes in their order, for promotion
// (Promotion.swift), which compares them.

extension Operation {
    /// Relative priority among the ready operations of one queue.
    public enum QueuePriority: Int, Sendable, Comparable {
        case veryLow = -8
        case low = -4
        case normal = 0
        case high = 4
        case veryHigh = 8

        /// Orders priorities from ``veryLow`` to ``veryHigh``.
        public static func < (a: Self, b: Self) -> Bool { a.rawValue < b.rawValue }

        /// 0 (veryLow) ... 4 (veryHigh): the index of the queue's ready list.
        var level: Int {
            switch self {
            case .veryLow: return 0
            case .low: return 1
            case .normal: return 2
            case .high: return 3
            case .veryHigh: return 4
            }
        }
    }

    /// `priorityWord` before ``queuePriority`` is assigned (every assigned value is a
    /// ``QueuePriority`` raw value, which fits in a byte).
    static let priorityUnset = Int8.min
    /// `priorityWord` of a barrier (``OperationQueue/addBarrierBlock(_:)``), which
    /// Foundation also ranks above ``QueuePriority/veryHigh``; ``queuePriority`` reads
    /// it as ``QueuePriority/normal``.
    static let barrierPriority: Int8 = 12
    /// The ready level of a barrier: above veryHigh's.
    static let barrierLevel = 5

    /// The index of the ready list this operation waits on in its queue (see
    /// ``queuePriority``). Called under the queue's lock.
    @inline(__always)
    func queueLevel(serial: Bool) -> Int {
        let raw = priorityWord.load(ordering: .relaxed)
        if raw == Operation.priorityUnset && (serial || !hasOwnPriority.load(ordering: .acquiring)) {
            return QueuePriority.normal.level
        }
        return queueLevelSlow(raw: raw)
    }

    /// `queueLevel`'s answer for an operation with a priority or a quality of service.
    func queueLevelSlow(raw: Int8) -> Int {
        if raw == Operation.barrierPriority { return Operation.barrierLevel }
        if raw != Operation.priorityUnset { return (QueuePriority(rawValue: Int(raw)) ?? .normal).level }
        let (qos, explicit) = guarded.locked { ($0.qualityOfService, $0.qosExplicit) }
        guard explicit else { return QueuePriority.normal.level }
        switch qos {
        case .userInteractive: return QueuePriority.veryHigh.level
        case .userInitiated: return QueuePriority.high.level
        case .utility: return QueuePriority.low.level
        case .background: return QueuePriority.veryLow.level
        default: return QueuePriority.normal.level
        }
    }

    /// The effective class this operation runs at, given its queue's: its own (or its
    /// queue's), raised to the class a promotion gave it (Promotion.swift, P1).
    @inline(__always)
    func effectiveQoS(queueDefault: QualityOfService) -> QualityOfService {
        let floor = promotedRank.load(ordering: .acquiring)
        let natural = naturalQoS(queueDefault: queueDefault)
        if floor == 0 { return natural }
        return ClassRank.of(natural) >= floor ? natural : ClassRank.qos(floor)
    }

    /// The class this operation runs at without promotion: its own, or its queue's.
    /// Inlined: an operation with no class or priority of its own, the usual one, reads
    /// one flag; the lock is out of line.
    @inline(__always)
    func naturalQoS(queueDefault: QualityOfService) -> QualityOfService {
        if !hasOwnPriority.load(ordering: .acquiring) { return queueDefault }
        return ownQoS(queueDefault: queueDefault)
    }

    @inline(never)
    private func ownQoS(queueDefault: QualityOfService) -> QualityOfService {
        let (qos, explicit, tp) = guarded.locked { ($0.qualityOfService, $0.qosExplicit, $0.extras?.threadPriority) }
        if explicit && qos != .default { return qos }
        if let tp, tp != 0.5 {
            switch tp {
            case ..<0.2: return .background
            case ..<0.4: return .utility
            case ..<0.6: return .default
            case ..<0.8: return .userInitiated
            default: return .userInteractive
            }
        }
        return queueDefault
    }
}

/// A quality-of-service class as a number that orders: 1 background … 5
/// userInteractive; 0 means none.
enum ClassRank {
    static func of(_ qos: QualityOfService) -> UInt8 {
        switch qos {
        case .background: return 1
        case .utility: return 2
        case .userInitiated: return 4
        case .userInteractive: return 5
        default: return 3
        }
    }

    static func qos(_ rank: UInt8) -> QualityOfService {
        switch rank {
        case 1: return .background
        case 2: return .utility
        case 4: return .userInitiated
        case 5: return .userInteractive
        default: return .default
        }
    }

    /// The class of a task priority. Swift's priorities share Dispatch's QoS values:
    /// high and userInitiated 25, medium 21, low and utility 17, background 9.
    static func of(_ priority: TaskPriority) -> UInt8 {
        switch priority.rawValue {
        case 33...: return 5
        case 25...: return 4
        case 21...: return 3
        case 17...: return 2
        default: return 1
        }
    }
}
