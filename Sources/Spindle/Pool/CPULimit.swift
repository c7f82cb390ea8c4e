import CSpindle

// A container's CPU limit, and the worker counts that follow it (cgroup.c, CG1-CG6).

extension ThreadPool {
    /// A CPU limit read from the process's control group (cgroup v1 or v2).
    public struct CPULimit: Sendable, Equatable {
        /// The tightest quota of the process's group and its ancestors, in CPUs: 1.5
        /// means 150 ms of CPU time per 100 ms.
        public var cpus: Double
        /// The workers it implies: `cpus` rounded up, at least 1.
        public var workers: Int
        /// The control-group version it was read from: 1 or 2.
        public var cgroupVersion: Int
    }

    /// Throttling of the limited group so far, from its `cpu.stat`.
    public struct CPUThrottling: Sendable, Equatable {
        /// Periods in which the group used up its quota and was stopped.
        public var periods: UInt64
        /// Time the group's threads spent stopped.
        public var time: Duration
    }

    /// The CPU limit of the process's container, or nil when it has none (or its files
    /// could not be read, which is said once to ``ThreadPool/logger``).
    ///
    /// Pools that set no ``Configuration/workers`` of their own have at most
    /// ``CPULimit/workers`` workers taking work. The process-wide pools (``shared`` and
    /// those of ``forQualityOfService(_:)``) follow the limit while the process runs:
    /// it is read again at most once a second while they are busy and as they go idle
    /// (never just as work arrives, which would wait for the read), and their
    /// ``activeWorkerCount`` grows or shrinks with it. `SPINDLE_WORKERS=N` in the
    /// environment replaces the limit's count for all of them.
    public static var cpuLimit: CPULimit? {
        var l = spindle_cpu_limit()
        unsafe spindle_cpu_limit_current(&l)
        guard l.workers > 0 else { return nil }
        return CPULimit(cpus: l.cpus, workers: Int(l.workers), cgroupVersion: Int(l.version))
    }

    /// The limited group's throttling so far, or nil without a limit (or a readable
    /// `cpu.stat`).
    public static var cpuThrottling: CPUThrottling? {
        var l = spindle_cpu_limit()
        unsafe spindle_cpu_limit_current(&l)
        var periods: UInt64 = 0, ns: UInt64 = 0
        guard l.workers > 0, unsafe spindle_cgroup_throttling(&l, &periods, &ns) == 0 else { return nil }
        return CPUThrottling(periods: periods, time: .nanoseconds(Int64(clamping: ns)))
    }

    /// How many of the pool's workers take work: ``workerCount``, except for a
    /// process-wide pool under a container's CPU limit (see ``cpuLimit``), whose other
    /// workers sleep until the limit grows. Plan parallel work for this many.
    public var activeWorkerCount: Int { unsafe Int(spindle_pool_active_workers(raw)) }
}
