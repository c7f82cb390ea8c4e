/*
 * spindle.h — the public C API of Spindle's work-stealing pool.
 *
 * A pool owns one worker thread per usable CPU (the CPUs in the process's affinity
 * mask, not the machine's total), each with its own Chase–Lev deque, plus one injector
 * queue for submissions from threads outside the pool. See pool.c for the design essay
 * (scheduling, wake-up and shutdown protocols).
 *
 * Ownership of work
 * -----------------
 * The unit of work is a `spindle_task`, an intrusive node the *caller* allocates. From
 * the moment `spindle_submit_task` returns 0 until the engine calls `task->run`, the
 * engine owns the node: it must stay valid and must not be touched. The engine calls
 * `run` exactly once; after that the node belongs to the caller again (typically `run`
 * frees it). Because the node is intrusive, submitting costs no allocation inside the
 * engine; a language binding can put the node and the closure in one allocation, and
 * take it from spindle_task_alloc, whose per-thread cache spares it malloc's
 * cross-thread free path.
 *
 * `run` receives a reason: SPINDLE_RUN, or SPINDLE_CANCELLED when the pool was destroyed
 * with SPINDLE_SHUTDOWN_CANCEL before the task started. A cancelled task must still
 * release whatever it owns; nothing the engine accepted is ever dropped silently.
 *
 * `spindle_submit` is the convenience form taking a function pointer and a context: the
 * engine allocates the node, calls `fn(ctx, reason)` exactly once and frees the node.
 * The context belongs to the caller throughout; the engine never dereferences it.
 *
 * Errors are returned as errno values (0 on success), never through errno itself.
 */
#ifndef SPINDLE_H
#define SPINDLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct spindle_pool spindle_pool;
typedef struct spindle_task spindle_task;

/** Why the engine is calling a task. */
typedef enum spindle_run_reason {
    /** Do the work. */
    SPINDLE_RUN = 0,
    /** The pool is being destroyed with SPINDLE_SHUTDOWN_CANCEL and the task never
     *  started: release its resources, do not do the work. */
    SPINDLE_CANCELLED = 1,
} spindle_run_reason;

typedef void (*spindle_task_fn)(spindle_task *task, spindle_run_reason reason);

/** An intrusive unit of work. Fill in `run`; leave `spindle_private` alone. */
struct spindle_task {
    /** Owned by the engine while the task is queued (queue link, reserved). */
    void *spindle_private[2];
    /** Called exactly once, on a worker thread (or, for a join frame popped back, not at
     *  all: see spindle_join). */
    spindle_task_fn run;
};

/** How `spindle_pool_destroy` treats work that has not started. */
typedef enum spindle_shutdown_mode {
    /** Run everything already queued, and everything that work spawns, then stop. */
    SPINDLE_SHUTDOWN_DRAIN = 0,
    /** Call every task that has not started with SPINDLE_CANCELLED, then stop. Running
     *  tasks finish normally. */
    SPINDLE_SHUTDOWN_CANCEL = 1,
} spindle_shutdown_mode;

/** Pool configuration. Always start from `spindle_config_init`. */
typedef struct spindle_config {
    /** Worker threads; 0 means one per CPU in the process's affinity mask. */
    uint32_t workers;
    /** Slots in each worker's deque; 0 means 256. Rounded up to a power of two, >= 4.
     *  When a deque is full, half of it moves to the injector (see deque.c). */
    uint32_t deque_capacity;
    /** How long a searching worker keeps looking for work before it parks, in
     *  nanoseconds; 0 means the default (SPINDLE_DEFAULT_SPIN_NS). */
    uint32_t spin_ns;
    /** Nice value each worker applies to itself at start, or SPINDLE_NICE_INHERIT (the
     *  default) to keep the process's: the main thread's, which `nice` and `renice -p`
     *  set, as it was when the process's first pool was created. Never the creating
     *  thread's: workers are started by the process's spawner
     *  thread (spawn.c), so a pool created from inside re-niced work does not silently
     *  run at that work's nice. A refused value (EACCES for a negative nice without
     *  privilege) leaves the worker at the process's nice and is reported by
     *  spindle_pool_nice_error. */
    int32_t nice;
    /** Linux scheduling policy of the workers: SPINDLE_POLICY_NORMAL (the default: the
     *  process's own, i.e. the main thread's — SCHED_OTHER unless the process was
     *  started under another, as by `chrt -b`; never the creating thread's),
     *  SPINDLE_POLICY_BATCH (SCHED_BATCH: throughput work, no wake-up preemption of
     *  others) or SPINDLE_POLICY_IDLE (SCHED_IDLE: runs only when nothing else wants the
     *  CPU, and is preempted at once when something does; still gets a small share, so
     *  it is never starved forever). A worker starts at the process's policy and may
     *  switch to these without privilege. */
    int32_t policy;
    /** Where workers go. NULL: a plan made at creation from the machine's topology
     *  (SPINDLE_SYSFS_ROOT or /sys, and the process affinity) with `pinning`, for
     *  `workers` workers. The pool copies what it needs; the caller keeps ownership. */
    const struct spindle_plan *plan;
    /** Pinning when `plan` is NULL: 0 node (default), 1 core, 2 none (spindle_pinning). */
    int32_t pinning;
    /** Allocator for per-worker memory on a NUMA node: each worker's own state (one
     *  block: the worker, its deque's indices, its parker, counters and steal order)
     *  and its deque ring, both from the worker's memory node (-1: no node). Any
     *  alignment malloc gives will do. NULL: libnuma's numa_alloc_onnode on a
     *  multi-node machine, malloc otherwise. Set both or neither. A seam for tests. */
    void *(*alloc_on_node)(size_t bytes, int32_t node, void *ctx);
    void (*free_on_node)(void *memory, size_t bytes, void *ctx);
    void *alloc_ctx;
    /** Thread-name prefix; NULL means "spindle-w". Workers are named prefix + index,
     *  truncated to the kernel's 15 characters. */
    const char *name;
    /** The scheduler time slice each worker asks for (Linux 6.12+, EEVDF's custom
     *  slice, sched_attr.sched_runtime), in nanoseconds. 0 means the default:
     *  SPINDLE_DEFAULT_SLICE_NS for SCHED_OTHER pools and the kernel's own for BATCH and
     *  IDLE ones; SPINDLE_SLICE_KERNEL keeps the kernel's for every policy. A shorter
     *  slice gives a woken worker an earlier deadline, so it preempts the thread that
     *  submitted work instead of waiting for it to block. A refusal (an older kernel)
     *  leaves the kernel's slice and is reported by spindle_pool_slice_error. */
    uint32_t slice_ns;
    /** The pool lives until the process exits: spindle_pool_shutdown and
     *  spindle_pool_destroy refuse it (EPERM), and submissions from outside skip the
     *  bookkeeping that lets a shutdown wait for racing submitters — two atomic
     *  read-modify-writes on a shared counter per submission. For process-wide pools. */
    bool permanent;
    /** Spare workers the pool may add, at most, while its workers are blocked inside
     *  tasks (spare.c): in Spindle's own blocking waits (spindle_blocking_begin, the
     *  blocking latch wait), or found blocked by the process's monitor (a worker inside
     *  one task, off its CPU, while work waits). Spares take the pool's nice and
     *  policy, run its work, and exit after `spare_idle_ns` without work. 0: none;
     *  spindle_config_init sets SPINDLE_DEFAULT_MAX_SPARES. At most 4096. */
    uint32_t max_spares;
    /** How long a spare waits for work before it exits, in nanoseconds; 0 means the
     *  default (SPINDLE_DEFAULT_SPARE_IDLE_NS). */
    uint64_t spare_idle_ns;
} spindle_config;

enum { SPINDLE_POLICY_NORMAL = 0, SPINDLE_POLICY_BATCH = 1, SPINDLE_POLICY_IDLE = 2 };
#define SPINDLE_DEFAULT_SLICE_NS 100000u
#define SPINDLE_SLICE_KERNEL UINT32_MAX
/* `nice` to keep the process's (INT32_MIN; a constant rather than a macro, which Swift
 * would not import). */
static const int32_t SPINDLE_NICE_INHERIT = -2147483647 - 1;

#define SPINDLE_DEFAULT_DEQUE_CAPACITY 256u
#define SPINDLE_DEFAULT_SPIN_NS 50000u
#define SPINDLE_DEFAULT_MAX_SPARES 64u
#define SPINDLE_DEFAULT_SPARE_IDLE_NS 2000000000ull

/** Fills `cfg` with the defaults. */
void spindle_config_init(spindle_config *cfg);

/**
 * Creates a pool and starts its workers. Returns 0 and sets `*out`, or EINVAL (bad
 * configuration), ENOMEM, or the error pthread_create returned (no thread is left
 * running on failure).
 */
int spindle_pool_create(const spindle_config *cfg, spindle_pool **out);

/**
 * Stops the pool: blocks until every worker has exited. On return every task the pool
 * accepted has been run (DRAIN) or run-or-cancelled (CANCEL), and later submissions
 * from outside fail with ESHUTDOWN. The memory stays valid until `spindle_pool_free`,
 * so other threads may still call into the pool safely while it shuts down.
 * Returns 0; EDEADLK, doing nothing, when called from one of this pool's own workers
 * (it would wait for itself); EALREADY when another caller had begun the shutdown —
 * this call then waits until the pool has stopped too, and a CANCEL takes over a
 * DRAIN in progress (tasks not yet started are cancelled from then on); EPERM for a
 * permanent pool (spindle_config.permanent).
 */
int spindle_pool_shutdown(spindle_pool *pool, spindle_shutdown_mode mode);

/** True when no task is queued or running (or the pool has stopped): a shutdown would
 *  then finish at once. A snapshot. */
bool spindle_pool_is_idle(const spindle_pool *pool);

/** Frees a pool. Shuts it down first (DRAIN) if nobody did. The caller guarantees that
 *  no other thread uses the pool any more, and that it is not one of its workers. */
void spindle_pool_free(spindle_pool *pool);

/** `spindle_pool_shutdown` then `spindle_pool_free`; returns what shutdown returned
 *  (on EDEADLK nothing is freed). */
int spindle_pool_destroy(spindle_pool *pool, spindle_shutdown_mode mode);

/**
 * Queues `task`. From one of this pool's workers the task goes on that worker's deque
 * (LIFO for the owner, stolen FIFO); from any other thread it goes to the injector.
 * Returns 0, or ESHUTDOWN when the pool is being destroyed and the caller is not one of
 * its workers, or ECHILD in a forked child for a pool created before fork(), which has
 * no threads there (the task is then still the caller's: nothing was queued).
 */
int spindle_submit_task(spindle_pool *pool, spindle_task *task);

/**
 * Queues `task` on the injector even from one of the pool's own workers: for work that
 * any worker should take at once, not the calling worker once it gets back to its deque
 * — a promoted operation's copy, submitted by a thread that is about to wait for it.
 * Returns as spindle_submit_task does from outside the pool (ESHUTDOWN, ECHILD).
 */
int spindle_submit_task_shared(spindle_pool *pool, spindle_task *task);

/** Nodes of up to this many bytes come from spindle_task_alloc's per-thread cache. */
#define SPINDLE_TASK_CACHED_BYTES 48

/**
 * Memory for a task node of `bytes` bytes (the `spindle_task` first, the caller's
 * payload after it), aligned as malloc aligns, or NULL when out of memory.
 *
 * A node is usually allocated by one thread and freed by the worker that runs it. Nodes
 * of up to SPINDLE_TASK_CACHED_BYTES come from a cache of the allocating thread's, and
 * go back to it from whichever thread frees them, so a steady stream of submissions
 * costs no malloc and no free (nodes.c). Larger nodes are plain malloc blocks.
 *
 * Free it with spindle_task_free, once, from any thread; never with free(). Freeing a
 * cached node twice aborts with a message naming the double free.
 */
void *spindle_task_alloc(size_t bytes);

/** Frees a node from spindle_task_alloc. NULL is ignored. */
void spindle_task_free(void *node);

/** Convenience: allocates the node. Returns 0, ENOMEM or ESHUTDOWN (then `fn` is never
 *  called and `ctx` is still the caller's). */
int spindle_submit(spindle_pool *pool, void (*fn)(void *ctx, spindle_run_reason reason),
                   void *ctx);

/** CPUs in the calling thread's affinity mask — on one of Spindle's (possibly pinned)
 *  workers, in the mask its pool was planned for: the default worker count of a pool
 *  the caller creates. */
uint32_t spindle_usable_cpu_count(void);

/** Number of worker threads. */
uint32_t spindle_pool_worker_count(const spindle_pool *pool);
/** True in a forked child for a pool that existed at fork(): it has no threads there,
 *  and refuses work with ECHILD. */
bool spindle_pool_is_forked(const spindle_pool *pool);

/** Spare workers running now (see spindle_config.max_spares). */
uint32_t spindle_pool_spare_count(const spindle_pool *pool);

/** Brackets code that blocks its thread (a lock, a semaphore, a sleep, synchronous I/O,
 *  a wait for other work). On a pool worker, the pool counts the worker out for the
 *  duration and, if work is waiting, wakes or starts a spare worker, so that the CPUs
 *  stay busy and work the blocked code waits for can run; elsewhere they do nothing.
 *  Nest freely; every begin needs its end, on the same thread. */
void spindle_blocking_begin(void);
void spindle_blocking_end(void);

/** Index of the calling thread among this pool's workers, or -1 when the caller is not
 *  one of them. */
int spindle_pool_current_worker(const spindle_pool *pool);

/** Pinning failures: 0, or the first error pthread_setaffinity_np returned (for
 *  instance for a plan describing CPUs this machine does not have). */
int spindle_pool_pin_error(const spindle_pool *pool);

/** The pool whose worker is the calling thread, or NULL. */
spindle_pool *spindle_current_pool(void);

/*
 * Container CPU limits (cgroup.c)
 * -------------------------------
 */

/** A CPU limit as read from the process's cgroup (v1 or v2). */
typedef struct spindle_cpu_limit {
    /** The tightest quota of the group and its ancestors, in CPUs (1.5: 150 ms of CPU
     *  per 100 ms); 0 when there is none, or it could not be read. */
    double cpus;
    /** The worker count it implies: ceil(cpus), at least 1; 0 without a limit. */
    uint32_t workers;
    /** The cgroup version read (1 or 2); 0 when no cpu hierarchy was found. */
    int32_t version;
    /** The group directory whose limit is the tightest (for its cpu.stat). */
    char dir[512];
    /** Why the limit could not be read, when a file was malformed; empty otherwise. */
    char reason[256];
} spindle_cpu_limit;

/** Reads the CPU limit of the process's cgroup with every path under `root` (NULL:
 *  SPINDLE_CGROUP_ROOT, else the real files). Never fails on bad input: it says why in
 *  `reason` and reports no limit. Returns 0, or ENOMEM. */
int spindle_cgroup_cpu_limit(const char *root, spindle_cpu_limit *out);
/** The process's limit as the pools follow it (re-read at most once a second while
 *  the pools are busy). */
void spindle_cpu_limit_current(spindle_cpu_limit *out);
/** Throttling of `limit`'s group so far (its cpu.stat): periods throttled, and time.
 *  Returns 0, or ENOENT without a readable cpu.stat. */
int spindle_cgroup_throttling(const spindle_cpu_limit *limit, uint64_t *nr_throttled, uint64_t *throttled_ns);

/**
 * How many of a pool's workers take work: the rest finish what they run, hand what
 * they hold to the injector and sleep until the count is raised again. 1 to the pool's
 * worker count (clamped). The process-wide pools follow the container's CPU limit by
 * this call; EPERM for other pools, whose count is fixed at creation.
 */
int spindle_pool_set_active_workers(spindle_pool *pool, uint32_t n);
/** The number of workers that take work (see spindle_pool_set_active_workers). */
uint32_t spindle_pool_active_workers(const spindle_pool *pool);

/** The calling thread's kernel thread id (gettid), cached per thread. */
int32_t spindle_thread_id(void);

/**
 * Makes thread `tid` (0: the calling thread) run at the scheduling policy, nice value
 * and time slice that `pool`'s workers run at, in one sched_setattr (promote.c). For a
 * thread running work promoted to another class, and for its return to its own.
 * Returns 0, or the errno of the kernel's refusal: a lower nice, or leaving
 * SCHED_IDLE, needs CAP_SYS_NICE or RLIMIT_NICE. On a refusal the thread gets the
 * target's policy at the lowest nice RLIMIT_NICE allows, if that is a promotion at all.
 * `got_nice`, if not NULL, receives the nice the thread was given (on a refusal with
 * nothing allowed, the target's, not applied).
 */
int spindle_thread_adopt_pool_priority(int32_t tid, const spindle_pool *pool, int32_t *got_nice);

/** The calling thread's scheduling policy, as SPINDLE_POLICY_NORMAL, _BATCH or _IDLE
 *  (any other, such as a real-time one, reads as NORMAL), and its nice in `*nice`. */
int spindle_thread_class_of_caller(int32_t *nice);

/** True when the calling thread is a worker and other work is waiting for it: tasks on
 * its own deque, or submissions in its pool's injector. A binding that keeps running
 * its own follow-on work on the worker (rather than submitting it) uses this to yield
 * to that work. A hint: it may be stale by the time it returns. */
bool spindle_current_worker_has_waiting_work(void);

/** True once `spindle_pool_destroy` has begun. */
bool spindle_pool_is_shutting_down(const spindle_pool *pool);

/*
 * Diagnostics
 * -----------
 * The engine's few messages (a machine scheduled as one NUMA node, a misuse it aborts
 * on) go to stderr, one line each, unless a handler is installed: then to the handler,
 * with a level, from whichever thread noticed. NULL restores stderr. The handler must
 * not call back into the engine.
 */
typedef enum spindle_log_level {
    SPINDLE_LOG_NOTICE = 0,
    SPINDLE_LOG_WARNING = 1,
    SPINDLE_LOG_ERROR = 2,
} spindle_log_level;
typedef void (*spindle_log_fn)(spindle_log_level level, const char *message, void *ctx);
void spindle_set_log_handler(spindle_log_fn fn, void *ctx);

/**
 * The nice value the workers actually run at, and 0 or the errno with which the
 * requested one was refused (each worker reports the first refusal; the pool keeps the
 * first one reported).
 */
int32_t spindle_pool_effective_nice(const spindle_pool *pool);
int spindle_pool_nice_error(const spindle_pool *pool);
/** The scheduling policy the workers run under (SCHED_OTHER, SCHED_BATCH, SCHED_IDLE as
 *  sched_getscheduler reports it), and 0 or the errno that refused the requested one. */
int spindle_pool_effective_policy(const spindle_pool *pool);
int spindle_pool_policy_error(const spindle_pool *pool);
/** 0, or the errno with which the kernel refused the workers' time slice. */
int spindle_pool_slice_error(const spindle_pool *pool);
/** The time slice the workers asked for, in ns (the configuration resolved: see
 *  slice_ns), or 0 when they kept the kernel's. */
uint32_t spindle_pool_requested_slice_ns(const spindle_pool *pool);
/** Asks the kernel for a scheduler time slice of `ns` for the calling thread (EEVDF's
 *  per-thread slice, Linux 6.12+; the kernel clamps it to 0.1-100 ms), keeping its
 *  policy and nice: what each worker does when it starts (slice_ns). 0, or the errno of
 *  the refusal. */
int spindle_thread_request_slice(uint32_t ns);

/** Per-worker counters. All are monotonic since the pool was created. */
typedef struct spindle_worker_stats {
    uint64_t executed;      /* tasks this worker ran (or cancelled)                   */
    uint64_t stolen;        /* tasks this worker took from another worker's deque      */
    uint64_t stolen_from;   /* tasks other workers took from this worker's deque       */
    uint64_t parked;        /* times this worker went to sleep                         */
    uint64_t injector_pops; /* tasks this worker took from the injector                */
    uint64_t overflowed;    /* tasks this worker moved from its full deque to injector */
    uint64_t cpu_ns;        /* CPU time the thread has consumed (a spare: its current
                               thread's, 0 between threads)                           */
    uint32_t spare;         /* 1: a spare slot, run by successive spare threads        */
} spindle_worker_stats;

/** Copies up to `count` workers' counters into `out`, the pool's own workers first,
 *  then every spare slot made so far (spindle_pool_slot_count); returns how many were
 *  copied. Safe to call at any time from any thread; each counter is read atomically. */
uint32_t spindle_pool_stats(const spindle_pool *pool, spindle_worker_stats *out,
                            uint32_t count);

/** The pool's workers plus the spare slots it has made so far (spare.c). */
uint32_t spindle_pool_slot_count(const spindle_pool *pool);
/** Tasks queued and not started (the injector and every deque), an estimate that is
 *  exact only when the pool is quiet; and the workers parked right now. For gauges. */
uint64_t spindle_pool_queued(const spindle_pool *pool);
uint32_t spindle_pool_parked(const spindle_pool *pool);

/** Sum of the CPU time consumed by all of this pool's worker threads, in nanoseconds. */
uint64_t spindle_pool_cpu_time_ns(const spindle_pool *pool);

/*
 * Fork-join
 * ---------
 * A join frame lives on the caller's stack. `spindle_fork` offers `frame->fn(ctx)` to
 * the pool; the caller then does its own half of the work and calls `spindle_join`:
 *   - if the frame was not taken by anyone, `spindle_join` returns true and the caller
 *     runs `fn(ctx)` itself (inline, no synchronisation: the common case). So it does
 *     when the fork offered nothing: on a worker that has used half its stack, so that
 *     waits nested in waits cannot exhaust it, or to a pool that is shutting down;
 *   - otherwise it waits until the thief has finished, executing other pool work in the
 *     meantime when the caller is a worker, and returns false.
 * Every fork must be joined, innermost first, before the frame goes out of scope.
 */
typedef struct spindle_join_frame {
    spindle_task task;          /* engine-owned */
    void (*fn)(void *ctx);      /* the offered half; set before spindle_fork */
    void *ctx;
    void *spindle_waiter;       /* engine-owned */
    uint32_t spindle_state;     /* engine-owned: the latch */
    uint32_t spindle_flags;     /* engine-owned */
} spindle_join_frame;

void spindle_fork(spindle_pool *pool, spindle_join_frame *frame);
bool spindle_join(spindle_pool *pool, spindle_join_frame *frame);

#if defined(__has_attribute)
#if __has_attribute(swiftcall) && __has_attribute(swift_context)
#define SPINDLE_HAS_SWIFTCALL 1
/**
 * Fork-join for the Swift layer, called with Swift's calling convention (clang's
 * `swiftcall`). The offered closure arrives as the two words Swift passes a
 * `() -> Void` argument in — entry point and context — and is called the way Swift
 * calls a closure, with the context in the `swiftself` register.
 *
 * `spindle_swift_fork` stores the closure's words in `frame` and forks it, the caller
 * runs its own half as plain Swift code, and `spindle_swift_join` joins. The join
 * returns true when nobody took the closure: the caller then calls it itself, as
 * plain Swift code that the compiler can inline, which a call from C could not be.
 * It returns false once a thief has run it. The caller passes the same closure value
 * to both calls, and Swift keeps a closure's context alive until its last use, so the
 * words in the frame stay valid until the join returns; the join traps if it is handed
 * other words than the fork was.
 *
 * Why in C: Swift can only store a closure that is not `@escaping` by first wrapping it
 * in a heap object (`withoutActuallyEscaping`), and the wrapper's allocation, retains
 * and escape check cost more than the rest of a fork. Here the words are only borrowed,
 * and any thief finishes with them before `spindle_swift_join` returns. The caller's
 * own half is not passed in: called from Swift, it is inlined into the caller.
 * The Swift side declares them with `@_silgen_name` (Sources/Spindle/Runtime/UnsafeABI.swift).
 * Compilers without `swiftcall`, such as gcc, do not get these declarations.
 */
__attribute__((swiftcall)) void spindle_swift_fork(
    spindle_pool *pool, spindle_join_frame *frame,
    void (*offered_fn)(void *__attribute__((swift_context)) ctx) __attribute__((swiftcall)), void *offered_ctx);
__attribute__((swiftcall)) bool spindle_swift_join(
    spindle_pool *pool, spindle_join_frame *frame,
    void (*offered_fn)(void *__attribute__((swift_context)) ctx) __attribute__((swiftcall)), void *offered_ctx);
#endif
#endif

/**
 * Runs `body(ctx, begin, end)` over disjoint ranges covering [0, n), on the caller and
 * the pool's workers, and returns when every range has finished. `grain` is the
 * smallest range handed out (0 picks one). The caller participates; when it is a
 * worker it also helps with other work while the last ranges finish.
 * Returns 0, or ENOMEM (then nothing ran).
 */
int spindle_parallel_for(spindle_pool *pool, size_t n, size_t grain,
                         void (*body)(void *ctx, size_t begin, size_t end), void *ctx);

#ifdef __cplusplus
}
#endif

#endif /* SPINDLE_H */
