import CSpindle
import Logging
import Synchronization

extension ThreadPool {
    /// Where Spindle's process-wide notes go: a machine scheduled as one NUMA node, a
    /// quality-of-service class whose nice value was refused, a class that runs fewer
    /// workers than wanted, an engine misuse it aborts on. A swift-log `Logger` labelled
    /// `spindle` by default, so it follows whatever `LoggingSystem.bootstrap` the
    /// program made; set it early (before the first pool) to send them elsewhere.
    ///
    /// Each note is said once per process. A pool of your own reports to its
    /// ``Configuration/logger`` instead.
    public static var logger: Logger {
        get { SpindleLogging.logger.locked { $0 } }
        set {
            SpindleLogging.logger.locked { $0 = newValue }
            SpindleLogging.installEngineHandler()
        }
    }
}

extension ThreadPool {
    /// Says, once, what the kernel refused this pool at its creation (its workers have
    /// applied their priority by then).
    func reportRefusals(to configured: Logger?, name: String) {
        var refused: [String] = []
        if let e = niceError { refused.append("nice \(effectiveNice) kept instead of the configured one (errno \(e))") }
        if let e = policyError { refused.append("scheduling policy refused (errno \(e))") }
        if let e = timeSliceError { refused.append("time slice refused (errno \(e))") }
        guard !refused.isEmpty else { return }
        let logger = configured ?? SpindleLogging.logger.locked { $0 }
        // A refused slice only means an older kernel (before 6.12): worth a notice, not
        // a warning.
        let level: Logger.Level = niceError != nil || policyError != nil ? .warning : .notice
        logger.log(level: level, "\(refused.joined(separator: "; "))", metadata: ["spindle.pool": "\(name)"])
    }
}

/// The façade's side of the engine's diagnostics (Sources/CSpindle/log.c): every
/// message the engine would print goes to ``ThreadPool/logger`` instead.
enum SpindleLogging {
    static let logger = Mutex(Logger(label: "spindle"))

    private static let installed = Atomic<Bool>(false)

    /// Routes the engine's messages to ``ThreadPool/logger``; once per process, before
    /// the first pool is created.
    static func installEngineHandler() {
        guard !installed.load(ordering: .acquiring) else { return }
        guard installed.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged
        else { return }
        unsafe spindle_set_log_handler({ level, message, _ in
            let text = unsafe message.map { unsafe String(cString: $0) } ?? ""
            SpindleLogging.log(level: level == SPINDLE_LOG_ERROR ? .error : level == SPINDLE_LOG_WARNING ? .warning : .notice,
                               "\(text)")
        }, nil)
    }

    /// One note to the process-wide logger.
    static func log(level: Logger.Level, _ message: Logger.Message, metadata: Logger.Metadata? = nil) {
        let logger = SpindleLogging.logger.locked { $0 }
        logger.log(level: level, message, metadata: metadata)
    }
}
