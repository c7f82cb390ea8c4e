/*
 * internal.h — structures shared by the engine's files. Not installed; not seen by Swift.
 *
 * One file per concern, each opening with its invariants (labels are unique across the
 * engine: a label names one file's rule):
 *   deque.c        Chase–Lev work-stealing deque (bounded ring, overflow to the injector)
 *   deque_owner.h  the deque's owner side, push and take, inline
 *   injector.c     multi-producer queue for submissions from outside the pool
 *   park.c         per-thread futex parking, the idle/searching accounting, wake-ups
 *   worker.c       the worker loop: finding work, stealing, running, sleeping
 *   join.c         fork-join frames, latches, parallel-for
 *   pool.c         create, submit, destroy (the design essay and the shutdown protocol)
 *   spawn.c        the thread that starts every worker, at the process's own priority
 *   spare.c        spare workers for workers blocked in a task, and the monitor that
 *                  finds blocking Spindle cannot see
 *   promote.c      a thread taking on another pool's priority while it runs promoted
 *                  work, and giving it back
 *   affinity.c     whose CPUs a new pool is planned for
 *   topology_discovery.c  CPUs, caches and NUMA nodes from sysfs
 *   topology_plan.c       placement plans and steal tiers
 *   topology_internal.h   the structures those two share
 *   numa.c         libnuma, looked up at run time (dlopen), for node-local memory
 *   log.c          where the engine's few diagnostics go (stderr, or a handler)
 *   nodes.c        memory for task nodes: per-thread caches that remote frees return to
 *   mutex.c        the futex mutex and the latch (spindle_sync.h)
 *   stats.c        counter snapshots and reports
 *   tsan.c         ThreadSanitizer annotations for locks TSan cannot see
 *   seams.c        test seams, in debug builds only (the tests' access to the engine
 *                  is Tests/CSpindleTesting: spindle_testing.h, testing.c)
 *
 * Below, each file's shared declarations are under its own heading.
 */
#ifndef SPINDLE_INTERNAL_H
#define SPINDLE_INTERNAL_H

#include "spindle.h"
#include "spindle_sync.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* ThreadSanitizer does not model standalone fences (atomic_thread_fence), so code that
 * publishes data through "relaxed store + fence" looks racy to it. Under TSan the deque
 * uses the equivalent release-store / acquire-load / seq_cst RMW forms instead (see
 * deque.c). Clang spells the check __has_feature, GCC __SANITIZE_THREAD__. */
#if defined(__SANITIZE_THREAD__)
#define SPINDLE_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SPINDLE_TSAN 1
#endif
#endif
#ifndef SPINDLE_TSAN
#define SPINDLE_TSAN 0
#endif

/* 128 bytes: x86's adjacent-line prefetcher pulls cache lines in pairs, so 64-byte
 * padding still false-shares (crossbeam's CachePadded makes the same choice). */
#define SPINDLE_CACHELINE 128
#define SPINDLE_ALIGNED __attribute__((aligned(SPINDLE_CACHELINE)))

static inline void spindle_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#else
    __asm__ __volatile__("" ::: "memory");
#endif
}

/* The intrusive link lives in task->spindle_private[0]. The public struct declares it as
 * a plain pointer so Swift can import the type; lock-free _Atomic(T *) has the same size
 * and representation as T * on every ABI Spindle builds for (checked below). */
_Static_assert(sizeof(_Atomic(spindle_task *)) == sizeof(void *), "atomic pointer size");
_Static_assert(_Alignof(_Atomic(spindle_task *)) == _Alignof(void *), "atomic pointer align");

static inline _Atomic(spindle_task *) *spindle_task_link(spindle_task *t) {
    return (_Atomic(spindle_task *) *)(void *)&t->spindle_private[0];
}

/* ------------------------------------------------------------------------------------
 * Injector (injector.c): Vyukov's intrusive MPSC queue, producers wait-free (one XCHG);
 * consumers serialised by a try-lock so that any worker may drain it in batches.
 */
typedef struct spindle_injector {
    /* Producer side. */
    SPINDLE_ALIGNED _Atomic(spindle_task *) tail;
    /* Reserved minus popped (J3): an upper bound on the queued tasks, for batch sizing,
     * emptiness hints, and a shutdown's count of outside submitters in flight. */
    _Atomic int64_t len;
    /* Consumer side, guarded by `consumer`. */
    SPINDLE_ALIGNED atomic_flag consumer;
    spindle_task *head;
    spindle_task stub;
} spindle_injector;

void spindle_injector_init(spindle_injector *q);
/* Counts `n` tasks in before they are linked (J3): a seq_cst RMW, step a of park.c's
 * Dekker pairing and of the shutdown's (pool.c, step 3). Returns the length before (a
 * hint: the backlog a submitter sees; park.c, "Backlog"). Every reservation is followed
 * by spindle_injector_link of that many tasks, or by spindle_injector_unreserve. */
static inline int64_t spindle_injector_reserve(spindle_injector *q, int64_t n) {
    return atomic_fetch_add_explicit(&q->len, n, memory_order_seq_cst);
}
/* Takes back a reservation that will not be linked; returns the length after. seq_cst:
 * ordered before the seq_cst reads of `len` by workers checking for quiescence. */
static inline int64_t spindle_injector_unreserve(spindle_injector *q, int64_t n) {
    return atomic_fetch_sub_explicit(&q->len, n, memory_order_seq_cst) - n;
}
/* Links the reserved chain first..last (already linked through their links; last's
 * link is overwritten). */
void spindle_injector_link(spindle_injector *q, spindle_task *first, spindle_task *last);
/* Reserve and link in one. Returns the length before the push (as reserve). */
static inline int64_t spindle_injector_push_chain(spindle_injector *q, spindle_task *first,
                                                  spindle_task *last, int64_t n) {
    int64_t before = spindle_injector_reserve(q, n);
    spindle_injector_link(q, first, last);
    return before;
}
static inline int64_t spindle_injector_push(spindle_injector *q, spindle_task *t) {
    return spindle_injector_push_chain(q, t, t, 1);
}
/* Pops up to `max` tasks into out[]; returns how many. 0 when empty, when a producer is
 * half-way through a push, or when another consumer holds the queue. */
uint32_t spindle_injector_pop_batch(spindle_injector *q, spindle_task **out, uint32_t max);
/* True when the queue may hold tasks (conservative: "maybe" answers true). */
bool spindle_injector_maybe_nonempty(spindle_injector *q);

/* ------------------------------------------------------------------------------------
 * Deque (deque.c): Chase–Lev, Lê et al. orderings, fixed power-of-two ring.
 */
typedef struct spindle_deque {
    SPINDLE_ALIGNED _Atomic int64_t top;    /* thieves CAS it forward               */
    SPINDLE_ALIGNED _Atomic int64_t bottom; /* written only by the owner            */
    _Atomic(spindle_task *) *buf;           /* `cap` slots, owner writes, all read  */
    int64_t mask;                           /* cap - 1                              */
} spindle_deque;

typedef enum { SPINDLE_STEAL_EMPTY = 0, SPINDLE_STEAL_OK = 1, SPINDLE_STEAL_RETRY = 2 } spindle_steal_result;

int spindle_deque_init(spindle_deque *d, uint32_t capacity, void *(*alloc)(size_t, void *),
                       void *alloc_ctx);
void spindle_deque_free(spindle_deque *d, void (*dealloc)(void *, size_t, void *),
                        void *alloc_ctx);
/* Owner only: push (LIFO end) and take — inline, in deque_owner.h. */
#include "deque_owner.h"
/* Any thread: FIFO. */
spindle_steal_result spindle_deque_steal(spindle_deque *d, spindle_task **out);
/* Any thread: racy length estimate (exact when quiescent). */
int64_t spindle_deque_len(spindle_deque *d);

/* ------------------------------------------------------------------------------------
 * Parking (park.c).
 */
typedef struct spindle_parker {
    _Atomic uint32_t state; /* futex word: EMPTY, PARKED, NOTIFIED */
} spindle_parker;

void spindle_parker_park(spindle_parker *p);
/* As spindle_parker_park, but gives up after `ns` nanoseconds: false if it did, with
 * no token consumed. */
bool spindle_parker_park_timeout(spindle_parker *p, uint64_t ns);
void spindle_parker_unpark(spindle_parker *p);

void spindle_futex_wait(_Atomic uint32_t *word, uint32_t expected);
/* As spindle_futex_wait, for at most `ns` nanoseconds. */
void spindle_futex_wait_timeout(_Atomic uint32_t *word, uint32_t expected, uint64_t ns);
void spindle_futex_wake(_Atomic uint32_t *word, int count);

/* Latch states (join.c / park.c). */
enum { SPINDLE_LATCH_UNSET = 0, SPINDLE_LATCH_SLEEPING = 1, SPINDLE_LATCH_SET = 2 };

typedef struct spindle_worker spindle_worker;

/* The idle accounting (tokio's idle.rs, Go's nmspinning/npidle). */
typedef struct spindle_idle {
    /* Low 32 bits: workers searching for work. High 32 bits: workers not parked.
     * RMW'd seq_cst; see park.c for the argument. */
    SPINDLE_ALIGNED _Atomic uint64_t state;
    SPINDLE_ALIGNED pthread_mutex_t lock;
    uint32_t *sleepers;     /* stack of parked worker indices, under `lock` */
    uint32_t nsleepers;     /* under `lock` */
    uint32_t task_sleepers; /* sleepers parked in the middle of a task (join waits) */
    uint32_t nworkers;
} spindle_idle;

/* A steal tier (topology_plan.c, PL3): the positions [lo, hi) of a pool's steal order
 * less [skip_lo, skip_hi), the inner tier searched before it (or the worker itself).
 * lo <= skip_lo <= skip_hi <= hi. Tiers are ranges rather than lists so that a pool's
 * steal orders take memory linear in its workers: every worker of a node shares one
 * ordering of the pool's workers and differs only in where its tiers cut it. */
typedef struct spindle_tier {
    uint32_t lo, hi, skip_lo, skip_hi;
} spindle_tier;

static inline uint32_t spindle_tier_size(spindle_tier t) { return t.hi - t.lo - (t.skip_hi - t.skip_lo); }

/* The position of the tier's member `k` (k < size): past the skipped range if at it. */
static inline uint32_t spindle_tier_at(spindle_tier t, uint32_t k) {
    uint32_t p = t.lo + k;
    return p >= t.skip_lo ? p + (t.skip_hi - t.skip_lo) : p;
}

/* ------------------------------------------------------------------------------------
 * Worker and pool.
 */
typedef struct spindle_counters {
    /* Single-writer counters (the owning worker), relaxed: readers want a value, not an
     * ordering. `stolen_from` is the exception: thieves add to it with fetch_add. */
    _Atomic uint64_t executed, stolen, parked, injector_pops, overflowed;
    /* Tasks that have returned: `executed != finished` while the worker is inside a
     * task (spare.c's monitor reads both). */
    _Atomic uint64_t finished;
    SPINDLE_ALIGNED _Atomic uint64_t stolen_from;
} spindle_counters;

struct spindle_worker {
    SPINDLE_ALIGNED spindle_deque deque;
    spindle_pool *pool;
    uint32_t index;
    uint32_t tick;           /* owner-only: scheduling ticks, for injector fairness */
    uint64_t rng;            /* owner-only: xorshift state for victim selection     */
    uintptr_t steal_floor;   /* owner-only: its thread's stack is half used below
                                this address; past it, forks run inline and join
                                waits do not steal (worker.c, W4). Set by each
                                thread that runs it.                                 */
    uintptr_t stack_high;    /* owner-only, tests: the top of its thread's stack when
                                its join waits' depth is recorded, else 0           */
    bool searching;          /* owner-only mirror of its share of idle.state        */
    bool guest;              /* owner-only: running on the CPU of the lower-ranked
                                outside thread that woke it; searches once, never
                                spins (park.c, G1)                                   */
    /* Under idle.lock: */
    bool in_sleepers;
    bool woken_searching;    /* set by the waker: wake as a searcher (notify) or not */
    bool waiting_in_task;    /* parked inside a join wait, not in the main loop      */
    int32_t waker_cpu;       /* set by the waker: its CPU if it is outside the pool and
                                outranked by the worker (G1), else -1               */
    int32_t pusher_cpu;      /* set by the waker: its CPU if it is a worker of this pool
                                that pushed work on its deque (G2), else -1         */
    /* Relaxed, read by its siblings (G2): the CPU it found itself on when it last woke,
     * -1 while parked. Written by its own thread only. */
    _Atomic int32_t cpu_hint;
    SPINDLE_ALIGNED spindle_parker parker;
    spindle_counters counters;
    pthread_t thread;
    /* Spare workers (spare.c). `spare` is fixed at creation. A spare pushes what it
     * spawns to the injector, never to its own deque, which nobody steals from. */
    bool spare;
    /* A retired worker's futex word (worker.c, W6): bumped when the active limit rises. */
    _Atomic uint32_t retire_seq;
    /* Under idle.lock: a spare slot whose thread has exited (or not started yet). */
    bool vacant;
    /* The thread's kernel id, for the monitor's CPU-time reads; 0 until it starts. */
    _Atomic int32_t tid;
    /* Depth of spindle_blocking_begin on this worker (owner writes; the monitor reads
     * it to leave such a worker to the explicit accounting). */
    _Atomic uint32_t blocking_depth;
    /* The monitor's own (spare.c): the task it saw last tick, and the thread's CPU time
     * then. */
    uint64_t mon_executed;
    uint64_t mon_cpu_ns;
    /* Under idle.lock: the monitor has counted this worker out as blocked (spare.c, C1).
     * Cleared by the monitor when it finds it running again, or by the worker itself
     * when it parks, whichever comes first: a worker that parks is counted once. */
    bool counted_out;
    /* Placement (topology_plan.c), fixed at creation. */
    int32_t node;          /* NUMA node the worker lives on                        */
    int32_t mem_node;      /* node this struct and its deque ring come from        */
    const int32_t *pin;    /* CPUs its thread is restricted to (npin 0: unpinned),
                              in the pool's plan                                   */
    uint32_t npin;
    /* Where it steals (topology_plan.c, PL3): positions in the pool's `ordered`. */
    spindle_tier local[3]; /* tiers within its node, nearest first                 */
    uint32_t nlocal;
    const spindle_tier *remote; /* other nodes, nearest first, in the pool's plan:
                                   shared by its node's workers                    */
    uint32_t nremote;
    /* The node-local block this struct lives in (pool.c, "a worker's own memory"), as
     * the allocator returned it, for freeing. */
    void *block;
    size_t block_bytes;
};

struct spindle_pool {
    /* Each on its memory node (pool.c). Slots [0, nworkers) are fixed at creation;
     * spare slots [nworkers, nslots) are added under idle.lock (spare.c), and the
     * array has room for nworkers + max_spares. */
    spindle_worker **workers;
    uint32_t nworkers;
    /* The regular workers in steal order (topology_plan.c, PL3): what the tiers index.
     * `workers` itself when the pool has no plan. Read-only after creation. */
    spindle_worker **ordered;
    /* The placement the pool was made from, kept for the workers' shared tiers and pin
     * lists; NULL without one. */
    struct spindle_plan *plan;
    /* Slots in use, regular and spare: grows only, published with release after the
     * slot is written, so that readers without the lock (acquire) see whole workers. */
    _Atomic uint32_t nslots;
    uint32_t max_spares;
    uint64_t spare_idle_ns;
    /* Under idle.lock: spares started and not yet exited; workers counted out as
     * blocked (explicitly, or by the monitor). */
    uint32_t spares_live;
    uint32_t blocked;
    /* Spare threads that have not finished exiting: shutdown waits for 0 (futex). */
    _Atomic uint32_t spares_running;
    /* Under idle.lock (spare.c, C4): no spare is claimed before this time (ns) after the
     * system refused one, and whether that refusal has been said. */
    uint64_t spare_retry_at;
    bool spare_refusal_said;
    /* The monitor's registry of pools (spare.c), under its lock. */
    spindle_pool *monitor_next;
    /* G2 (park.c): when a worker last moved itself off its waker's CPU (ns, relaxed:
     * a rate limit), and how many times one has (tests). */
    _Atomic uint64_t spread_at;
    _Atomic uint32_t spreads;
    uint32_t deque_capacity;
    uint64_t spin_ns;
    int32_t requested_nice;
    int32_t requested_policy;
    char name[16];

    SPINDLE_ALIGNED spindle_injector injector;
    spindle_idle idle;

    /* 0 running, 1 draining, 2 cancelling. Set once by destroy (seq_cst: pairs with the
     * seq_cst reservation in the injector's `len` in spindle_submit_task, Dekker-style;
     * pool.c, shutdown step 3). */
    SPINDLE_ALIGNED _Atomic int shutdown;
    bool permanent;
    /* Set in a forked child for every pool that existed at fork(): its threads do not
     * exist there, so it refuses work (ECHILD) rather than queue what nobody will run.
     * Written only by the child's single thread in the atfork handler (pool.c). */
    bool forked;
    /* The registry of all pools (pool.c), for that handler; under its lock. */
    spindle_pool *registry_next;
    /* Every worker pinned to one CPU of its own (set at creation). */
    bool pinned_per_cpu;
    /* Set under idle.lock when the pool has quiesced after shutdown; workers exit. */
    _Atomic bool terminated;
    /* Set by shutdown once every worker has been joined. */
    _Atomic bool joined;
    /* 1 once the pool has stopped (joined), as a futex word: concurrent shutdown
     * callers wait on it (pool.c, step 6). */
    _Atomic uint32_t stopped;

    /* Workers that have finished starting (name, nice); create waits for all of them. */
    _Atomic uint32_t ready;
    /* How many workers take work (cgroup.c, CG6; worker.c, W6): the others, from index
     * `active_limit` up, retire. nworkers unless set; changed only for permanent pools.
     * `retired` counts the workers asleep in retirement, for the monitor. */
    _Atomic uint32_t active_limit;
    _Atomic uint32_t retired;
    void *(*alloc_on_node)(size_t, int32_t, void *);
    void (*free_on_node)(void *, size_t, void *);
    void *alloc_ctx;
    _Atomic int pin_error;
    _Atomic int32_t effective_nice;
    _Atomic int nice_error;
    _Atomic int effective_policy;
    _Atomic int policy_error;
    _Atomic int slice_error;
    uint32_t requested_slice_ns; /* 0: keep the kernel's */
    /* Set by a worker running under a real-time policy, which has no slice to ask for
     * (worker.c, apply_priority): the pool then reports none requested. */
    _Atomic bool slice_not_asked;
    /* The CPUs this pool was planned for (spindle_creator_affinity at creation; NULL if
     * that failed): what its unpinned workers may use, and what pools created by its
     * workers are planned for. Fixed at creation. */
    cpu_set_t *affinity;
#ifdef SPINDLE_TESTING
    /* 1 while a test holds the pool's workers (seams.c, spindle_seam_hold); a futex
     * word, woken when the hold is lifted. */
    _Atomic uint32_t test_hold;
#endif
};

/* ---- worker.c ---------------------------------------------------------------------- */
extern _Thread_local spindle_worker *spindle_tls_worker SPINDLE_TLS_INITIAL_EXEC;
void *spindle_worker_main(void *arg);
/* Runs pool work on worker `w` until `*latch` is SET (latch may not be NULL here). */
void spindle_worker_wait_latch(spindle_worker *w, _Atomic uint32_t *latch);
void spindle_run_task(spindle_worker *w, spindle_task *t);
/* spindle_worker_push's other cases: a spare's push, which goes to the injector, and a
 * full deque, whose older half moves there. */
void spindle_worker_push_slow(spindle_worker *w, spindle_task *t);
/* W4: is worker `w`, the calling thread, past its stack floor here? Always inlined, so
 * the frame is the caller's. The stack grows down. */
__attribute__((always_inline)) static inline bool spindle_worker_past_floor(const spindle_worker *w) {
    return (uintptr_t)__builtin_frame_address(0) < w->steal_floor;
}
/* Records `err` in a pool's report `slot` unless an earlier failure did: first wins. */
void spindle_report_first_error(_Atomic int *slot, int err);

/* worker.c, W7: gives every regular worker of `pool` its policy; by the pool's creator,
 * once they are all ready. */
void spindle_workers_take_policy(spindle_pool *pool);
/* promote.c, PR4: decides once whether the asymmetric barrier can use membarrier. */
void spindle_barrier_init(void);

/* ---- seams.c: test seams, in debug builds only (SPINDLE_TESTING) -------------------- */
/* Kinds of thread a test may have refused (spindle_test_refused_thread_in_forked_child);
 * in a release build none is. */
enum { SPINDLE_SEAM_SPARE = 1, SPINDLE_SEAM_SPAWNER = 2, SPINDLE_SEAM_SERVICE = 4 };
#ifdef SPINDLE_TESTING
/* While not 0, threads that start count as deep (W4) once this many bytes of their
 * stack are used (SIZE_MAX: from the start, so that tests can run join waits that never
 * steal), and record their deepest join wait. */
extern _Atomic size_t spindle_test_join_floor;
extern _Atomic size_t spindle_test_deepest_join;
/* A join setter's pause before it wakes a parked waiter (L2), in ns. */
extern _Atomic uint64_t spindle_test_latch_wake_delay;
void spindle_test_record_join_wait(size_t used);
void spindle_test_limit_threads(int32_t limit);
/* Relaxed, both: a test sets them before the threads or joins they concern. */
static inline size_t spindle_seam_join_floor(void) {
    return atomic_load_explicit(&spindle_test_join_floor, memory_order_relaxed);
}
static inline uint64_t spindle_seam_latch_wake_delay(void) {
    return atomic_load_explicit(&spindle_test_latch_wake_delay, memory_order_relaxed);
}
extern _Atomic uint32_t spindle_test_refused_threads;
extern _Atomic uint32_t spindle_test_refusals;
extern _Atomic uint32_t spindle_test_refusal_gate;
void spindle_seam_wait_at_refusal_gate(void);
extern _Atomic uint32_t spindle_test_monitor_naps;
extern _Atomic uint32_t spindle_test_monitor_wakes;
/* Relaxed: counts a test polls; nothing is published through them. */
static inline void spindle_seam_count_monitor_nap(void) {
    atomic_fetch_add_explicit(&spindle_test_monitor_naps, 1, memory_order_relaxed);
}
static inline void spindle_seam_count_monitor_wake(void) {
    atomic_fetch_add_explicit(&spindle_test_monitor_wakes, 1, memory_order_relaxed);
}
/* While the gate is closed (not 0), the monitor, having found nothing to watch, stops
 * before it announces its sleep (spare.c, MI1), counted in `monitor_gated`, until the
 * test opens it: what the test does meanwhile falls between the monitor's two looks. */
extern _Atomic uint32_t spindle_test_monitor_gate;
extern _Atomic uint32_t spindle_test_monitor_gated;
void spindle_seam_wait_at_monitor_gate(void);
/* Relaxed: the wait re-reads the gate with acquire before the monitor goes on. */
static inline void spindle_seam_monitor_gate(void) {
    if (atomic_load_explicit(&spindle_test_monitor_gate, memory_order_relaxed)) spindle_seam_wait_at_monitor_gate();
}
/* While the gate is closed (not 0), a pool's creator stops between the pool's entry in
 * the registry and its entry in the monitor's list (pool.c), with the pool published in
 * `registration_gated_pool`, until the test opens it: a fork() meanwhile copies a pool
 * that is half registered. */
extern _Atomic uint32_t spindle_test_registration_gate;
extern _Atomic(spindle_pool *) spindle_test_registration_gated_pool;
void spindle_seam_wait_at_registration_gate(spindle_pool *pool);
/* Relaxed: the wait re-reads the gate with acquire before the creator goes on. */
static inline void spindle_seam_registration_gate(spindle_pool *pool) {
    if (atomic_load_explicit(&spindle_test_registration_gate, memory_order_relaxed))
        spindle_seam_wait_at_registration_gate(pool);
}
/* How often an outside waiter's spin ended because its pool had every worker awake
 * (join.c, L3). Relaxed: a count a test polls. */
extern _Atomic uint32_t spindle_test_spin_cuts;
static inline void spindle_seam_count_spin_cut(void) {
    atomic_fetch_add_explicit(&spindle_test_spin_cuts, 1, memory_order_relaxed);
}
/* Relaxed, both: a test sets the kinds before the thread creations it concerns, and
 * reads the count of refusals after them. A closed gate holds each refusal, counted,
 * until the test opens it (spindle_seam_wait_at_refusal_gate). */
static inline bool spindle_seam_thread_refused(uint32_t kind) {
    if ((atomic_load_explicit(&spindle_test_refused_threads, memory_order_relaxed) & kind) == 0) return false;
    atomic_fetch_add_explicit(&spindle_test_refusals, 1, memory_order_relaxed);
    if (atomic_load_explicit(&spindle_test_refusal_gate, memory_order_relaxed)) spindle_seam_wait_at_refusal_gate();
    return true;
}
void spindle_seam_wait_while_held(spindle_pool *pool);
/* A worker of a held pool waits here, with the task it took, before running it.
 * Relaxed: a task submitted after the hold was set reaches the worker through its
 * queue's release and acquire, which order the hold's store before this load; the wait
 * re-reads the word with acquire before the worker goes on. */
static inline void spindle_seam_hold(spindle_pool *pool) {
    if (atomic_load_explicit(&pool->test_hold, memory_order_relaxed)) spindle_seam_wait_while_held(pool);
}
#else
static inline bool spindle_seam_thread_refused(uint32_t kind) {
    (void)kind;
    return false;
}
static inline void spindle_seam_hold(spindle_pool *pool) { (void)pool; }
static inline void spindle_seam_count_monitor_nap(void) {}
static inline void spindle_seam_count_monitor_wake(void) {}
static inline void spindle_seam_monitor_gate(void) {}
static inline void spindle_seam_registration_gate(spindle_pool *pool) { (void)pool; }
static inline void spindle_seam_count_spin_cut(void) {}
static inline size_t spindle_seam_join_floor(void) { return 0; }
static inline uint64_t spindle_seam_latch_wake_delay(void) { return 0; }
static inline void spindle_test_record_join_wait(size_t used) { (void)used; }
static inline bool spindle_test_thread_allowed(uint32_t started) {
    (void)started;
    return true;
}
#endif

/* Accessors for the tests' view of a pool (declared for them in spindle_testing.h). */
uint32_t spindle_pool_steal_tiers(const spindle_pool *pool, uint32_t w);
int32_t spindle_pool_worker_node(const spindle_pool *pool, uint32_t w);

/* ---- join.c ------------------------------------------------------------------------ */
/* Worker `w` waits for `*latch` without running anything, counted out meanwhile
 * (spare.c). */
void spindle_worker_block_on_latch(spindle_worker *w, _Atomic uint32_t *latch);

/* ---- park.c: the idle protocol ----------------------------------------------------- */
uint64_t spindle_now_ns(void);
/* `capacity`: the most workers that may park at once (the pool's and its spares). */
int spindle_idle_init(spindle_idle *idle, uint32_t nworkers, uint32_t capacity);
void spindle_idle_destroy(spindle_idle *idle);
/* The idle accounting word: state = (unparked << 32) | searching (park.c). */
#define SPINDLE_SEARCHING(s) ((uint32_t)((s) & 0xffffffffu))
#define SPINDLE_SEARCHING_ONE ((uint64_t)1)
#define SPINDLE_UNPARKED_ONE ((uint64_t)1 << 32)
#define SPINDLE_UNPARKED(s) ((uint32_t)((s) >> 32))
static inline bool spindle_should_wake(const spindle_idle *idle, uint64_t s) {
    return SPINDLE_SEARCHING(s) == 0 && SPINDLE_UNPARKED(s) < idle->nworkers;
}
/* Wakes one sleeper if the counts still say so (under the idle lock). */
void spindle_wake_one(spindle_pool *pool, bool from_outside);
/* Wakes one sleeper even though somebody is searching: the injector has a backlog the
 * searchers are not draining (park.c, "Backlog"). */
void spindle_wake_for_backlog(spindle_pool *pool);
/* Injector length from which an outside submission wakes a sleeper whatever the
 * searching count says. */
#define SPINDLE_BACKLOG_WAKE 128
/* spare.c, C4: how long a pool claims no spare after the system refused one. */
#define SPINDLE_SPARE_RETRY_NS (10u * 1000u * 1000u)

/* Makes sure someone will look at work the caller has just published: step b/c of
 * park.c's Dekker pairing. Inline: it runs on every local spawn. */
static inline void spindle_notify_one(spindle_pool *pool) {
    /* Step b: the caller has just published work; order that store before our load of
     * the state. */
    atomic_thread_fence(memory_order_seq_cst);
    /* Relaxed after the fence: the fence provides the ordering. Fast path: someone is
     * searching or nobody is parked — no lock, no syscall. */
    if (spindle_should_wake(&pool->idle, atomic_load_explicit(&pool->idle.state, memory_order_relaxed)))
        spindle_wake_one(pool, false);
}

void spindle_wake_one_for_push(spindle_pool *pool);

/* notify_one for a worker that has just pushed work on its own deque: the same, except
 * that the sleeper it wakes moves off the pusher's CPU if it lands there (G2). */
static inline void spindle_notify_one_after_local_push(spindle_pool *pool) {
    /* Step b, as in spindle_notify_one. */
    atomic_thread_fence(memory_order_seq_cst);
    if (spindle_should_wake(&pool->idle, atomic_load_explicit(&pool->idle.state, memory_order_relaxed)))
        spindle_wake_one_for_push(pool);
}

/* Local push from worker `w`, then a wake for a sleeper if the pool needs one. Inline,
 * as the deque's own push is (deque_owner.h): it is most of a fork's cost in the engine,
 * and a call of its own, with the registers it saves, would be a large part of the
 * rest. */
static inline void spindle_worker_push(spindle_worker *w, spindle_task *t) {
    if (__builtin_expect(w->spare || !spindle_deque_try_push(&w->deque, t), 0)) {
        spindle_worker_push_slow(w, t);
        return;
    }
    spindle_notify_one_after_local_push(w->pool);
}

/* notify_one for a caller whose last publishing step was spindle_injector_push (a
 * seq_cst RMW): no fence needed (park.c). `backlog`: what that push returned. */
static inline void spindle_notify_one_after_push(spindle_pool *pool, int64_t backlog) {
    /* Step c without fence b: seq_cst load after the injector's seq_cst increment of
     * `len` (see the top of park.c). */
    uint64_t s = atomic_load_explicit(&pool->idle.state, memory_order_seq_cst);
    if (spindle_should_wake(&pool->idle, s))
        spindle_wake_one(pool, true);
    else if (backlog >= SPINDLE_BACKLOG_WAKE && SPINDLE_UNPARKED(s) < pool->idle.nworkers)
        spindle_wake_for_backlog(pool);
}
void spindle_notify_all(spindle_pool *pool);
bool spindle_idle_try_start_searching(spindle_idle *idle);
bool spindle_idle_stop_searching(spindle_idle *idle); /* true: was the last searcher */
/* Parks worker `w`. `latch` NULL: main loop; returns false when the pool terminated.
 * Non-NULL: a join wait; returns once woken (the latch may or may not be set). */
bool spindle_idle_sleep(spindle_worker *w, _Atomic uint32_t *latch);
/* Called by whoever set a latch that a worker was sleeping on. */
void spindle_idle_wake_latch_waiter(spindle_worker *w);
bool spindle_pool_has_pending_work(spindle_pool *pool);


/* ---- nodes.c ----------------------------------------------------------------------- */
/* Pushes the calling thread's batch of other heaps' nodes to their owners (N4). */
void spindle_task_cache_flush(void);

/* ---- pool.c ------------------------------------------------------------------------ */
/* The most workers (and spare workers) a pool has. */
#define SPINDLE_MAX_WORKERS 4096
/* The process-wide pools take the current CPU limit's worker count (CG6). */
void spindle_pools_follow_cpu_limit(void);

/* ---- cgroup.c ---------------------------------------------------------------------- */
/* The worker count for pools that set none: SPINDLE_WORKERS, else the CPU limit's; 0
 * for neither (CG3, CG5). */
uint32_t spindle_cpu_limit_workers(void);
/* Whether SPINDLE_WORKERS sets the count (then the limit is not followed). */
bool spindle_cpu_limit_from_env(void);
/* Reads the limit again if it was last read `min_interval_ns` ago or more; true when its
 * worker count changed (CG6). */
bool spindle_cpu_limit_refresh(uint64_t min_interval_ns);
/* Makes spare slot `index` (a flat worker that steals from the pool's own workers,
 * with a small deque), vacant. NULL on allocation failure. */
spindle_worker *spindle_create_spare_worker(spindle_pool *pool, uint32_t index);

/* ---- spawn.c ----------------------------------------------------------------------- */
/* Starts a detached thread of the engine's own (the spawner, the monitor) running
 * `main_fn`, with a small stack (a worker's, with `worker_stack`) and signals blocked
 * but for the synchronous faults and SIGPROF. 0 or pthread_create's error. */
int spindle_start_service_thread(void *(*main_fn)(void *), bool worker_stack);
/* Starts a service thread (spindle_start_service_thread) from the spawner, so that it
 * begins at the process's own CPUs, nice and policy; waits for it. 0 or the error. */
int spindle_spawn_service_thread(void *(*main_fn)(void *));
/* Starts the pool's workers on the process's spawner thread, in worker order. Returns
 * 0, or the first pthread_create error with *started threads running. */
int spindle_spawn_workers(spindle_pool *pool, uint32_t *started);
/* Starts one spare worker's thread (detached) on the spawner, without waiting for it.
 * Returns 0 or ENOMEM; a failed pthread_create is handled by the spawner (the slot is
 * given back: spindle_spare_start_failed). */
int spindle_spawn_spare(spindle_pool *pool, spindle_worker *w);
/* False when a test's thread limit forbids the next worker (spindle_test_limit_threads). */
bool spindle_test_thread_allowed(uint32_t started);

/* ---- spare.c ----------------------------------------------------------------------- */
/* Under idle.lock, from spindle_wake_one: when no worker is parked and some are counted
 * out as blocked, claims a spare slot, accounts the spare as a searcher, and returns it
 * for the caller to start (spindle_start_spare) once it has unlocked; NULL if none. */
spindle_worker *spindle_claim_spare_locked(spindle_pool *pool);
void spindle_start_spare(spindle_pool *pool, spindle_worker *w);
/* The spawner could not start spare `w`'s thread: gives its slot back. */
void spindle_spare_start_failed(spindle_pool *pool, spindle_worker *w);
/* Called by a spare whose wait for work timed out, under idle.lock, still listed as a
 * sleeper: takes it off the list and marks its slot vacant. */
void spindle_retire_spare_locked(spindle_pool *pool, spindle_worker *w);
/* Under idle.lock, by a worker about to park: if the monitor counted it out, counts it
 * in again (C1) and returns true — it is then already missing from the unparked count,
 * which its parking must not decrement a second time. */
bool spindle_uncount_parking_locked(spindle_pool *pool, spindle_worker *w);
/* Registers a pool with the monitor, and takes it off before it is freed. */
void spindle_monitor_register(spindle_pool *pool);
void spindle_monitor_unregister(spindle_pool *pool);
/* A parked or retired worker runs again, or a pool is new: a sleeping monitor starts
 * watching again (spare.c, MI1). */
void spindle_monitor_poke(void);
/* G2 (park.c): called by worker `w`, woken by a sibling's push, on finding itself on the
 * pusher's CPU `cpu`; returns the CPU it is on afterwards. */
int spindle_worker_spread(spindle_worker *w, int cpu);
/* The CPUs worker `w` may run on, into `set` (CPU_ALLOC(SPINDLE_MAX_CPUS)): its plan's
 * (one CPU, or a node's), or, unpinned, those the pool was planned for. False when
 * unpinned and the pool has no record of those. */
bool spindle_worker_cpus(const spindle_worker *w, cpu_set_t *set);

/* ---- affinity.c -------------------------------------------------------------------- */
/* The largest CPU id + 1 Spindle handles; masks are CPU_ALLOC(SPINDLE_MAX_CPUS). */
#define SPINDLE_MAX_CPUS 8192
/* The CPUs a pool created by the calling thread is planned for, in a new mask of
 * CPU_ALLOC_SIZE(SPINDLE_MAX_CPUS) bytes for the caller to CPU_FREE: the thread's own
 * affinity or, on a Spindle worker — which may be pinned to a single CPU — the mask
 * that worker's pool was planned for ("Whose CPUs"). NULL on failure, with errno set
 * (ENOMEM, or sched_getaffinity's). */
cpu_set_t *spindle_creator_affinity(void);
/* The CPUs the process started with (the main thread's mask when the engine was
 * loaded), in a new mask as above. Process-wide pools are planned for it: set
 * spindle_tls_planning_for_process around their creation. */
cpu_set_t *spindle_process_affinity(void);
extern _Thread_local bool spindle_tls_planning_for_process;

/* ---- topology_discovery.c, topology_plan.c ----------------------------------------- */
#include "spindle_topology.h"
bool spindle_topology_node_has_memory(const spindle_topology *t, uint32_t node_index);
/* A copy of `plan` for a pool to keep, or NULL (ENOMEM). */
spindle_plan *spindle_plan_clone(const spindle_plan *plan);
/* The plan's steal order: worker indices by position (topology_plan.c, PL3). */
const uint32_t *spindle_plan_order(const spindle_plan *plan);
/* Worker `w`'s tiers within its node, at most 3, into `out`; returns how many. */
uint32_t spindle_plan_local_tiers(const spindle_plan *plan, uint32_t w, spindle_tier out[3]);
/* Worker `w`'s tiers on other nodes, nearest first, owned by the plan. */
const spindle_tier *spindle_plan_remote_tiers(const spindle_plan *plan, uint32_t w, uint32_t *count);
/* The CPUs worker `w` may run on, owned by the plan (count 0: unpinned). */
const int32_t *spindle_plan_pin_list(const spindle_plan *plan, uint32_t w, uint32_t *count);

/* ---- log.c ------------------------------------------------------------------------- */
/* One diagnostic, printf-style: to the installed handler, or a line on stderr. */
void spindle_log(spindle_log_level level, const char *format, ...) __attribute__((format(printf, 2, 3)));

/* ---- numa.c: libnuma at run time --------------------------------------------------- */
/* 0 when NUMA memory policy is usable; otherwise 1, with why in `buf`. */
int spindle_numa_unavailable_reason(char *buf, size_t size);
/* Usable, and more than one node: pools then take their memory from libnuma. */
bool spindle_numa_multinode(void);
/* `node` < 0: no particular node. NULL on failure. Free with spindle_numa_free. */
void *spindle_numa_alloc(size_t bytes, int32_t node);
void spindle_numa_free(void *mem, size_t bytes);

#endif /* SPINDLE_INTERNAL_H */
