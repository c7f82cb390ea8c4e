/*
 * worker.c — what a worker thread does: find a task, run it, and when there is none,
 * search briefly and then sleep.
 *
 * Where a worker looks, in order (find_task):
 *   1. every 61st tick, the injector first — Go's schedule() does the same with its
 *      global run queue, so that a worker whose deque never empties (a task that keeps
 *      spawning) cannot starve submissions from outside the pool (W1). 61 is prime so
 *      it does not fall into step with periodic spawn patterns;
 *   2. its own deque, newest first (LIFO: the data the last task touched is hot);
 *   3. the injector, taking a batch (up to a quarter of the deque's capacity, and no
 *      more than its fair share len/workers + 1) so that one trip through the
 *      consumer try-lock feeds it for a while; all but the first go on its deque
 *      where others can steal them;
 *   4. as a searcher (see park.c, S1): the other workers' deques, oldest first, nearest
 *      tier first (SMT sibling, L3, node, other nodes by distance: topology_plan.c, PL3)
 *      from a random member of each tier, batch-stealing across nodes; and the
 *      injector again; for up to `spin_ns`, yielding the CPU every 16 rounds to any
 *      other runnable thread (see spindle_thread_request_slice for why) — or for one
 *      round only when it is a guest on the CPU of the outside thread that woke it
 *      (park.c, G1).
 * When all of that finds nothing it parks (spindle_idle_sleep).
 *
 * Invariants
 *   W1  The injector is polled at least once every 61 tasks a worker runs.
 *   W2  `searching` mirrors this worker's contribution to idle.state: set when it
 *       became a searcher (or was woken as one), cleared — with the "last searcher
 *       wakes the next when work is pending" rule — as soon as it finds a task.
 *   W3  A task runs on exactly one thread, exactly once, whatever path found it.
 *   W4  A join wait runs other work on the waiting thread's stack, on top of the frame
 *       that waits, so chains of waits that each take unrelated work can nest without
 *       bound. Stealing is one way; the injector is another, and on a spare the usual
 *       one: a spare's forks go to the injector (spare.c), and a spare waiting for one
 *       of them takes the oldest task there, an unrelated one, at every level. Once a
 *       thread has used half its stack:
 *         - its forks do not fork: the forking code runs both halves itself, and its
 *           parallel loops run every iteration themselves (join.c). So what runs
 *           there never waits, and a task taken there runs to its end as plain
 *           recursion before the next is taken: the stack stops growing by nesting;
 *         - its join waits (for frames forked above the floor) stop stealing: they
 *           take work from their own deque and the injector only, then park on the
 *           latch. That is never a deadlock: the frame waited for is running on the
 *           thief that took it, or it is in the injector, where this waiter or any
 *           other worker finds it.
 *       Neither depends on spares, whose number is capped: blocking instead, and
 *       leaving the waited-for frame to a spare, would let every spare reach its
 *       floor and block in turn. oneTBB bounds stealing by stack depth the same way;
 *       rayon does not, and its stacks can overflow under adverse scheduling.
 *   W6  A worker whose index is at or above the pool's active limit (a process-wide
 *       pool following a container's CPU limit: cgroup.c, CG6) retires at the top of
 *       its loop, where it runs no task and holds no join frame: it stops searching
 *       (found_work's hand-over, as when a searcher finds a task), moves what its
 *       deque holds to the injector and notifies, then sleeps on `retire_seq` until
 *       the limit is above its index again. It stays counted as unparked and not
 *       searching, like a worker inside a long task: no wake-up is aimed at it, no
 *       spare stands in for it, and the Dekker pairing of park.c is untouched. The
 *       raise stores the limit and then bumps `retire_seq`; the worker reads the word,
 *       then the limit, then waits on the word's value, so a raise is never missed.
 *       Back from retirement it pokes the monitor, which may have gone to sleep
 *       counting it retired (spare.c, MI1).
 *   W7  A regular worker of a pool with a policy of its own (SCHED_IDLE, SCHED_BATCH)
 *       leaves the policy to the thread creating the pool, which sets it once the
 *       worker has counted itself ready (spindle_workers_take_policy). A thread that
 *       makes itself SCHED_IDLE is preempted by any other runnable thread, and on a
 *       busy machine may not run again for seconds: its count, and with it the pool's
 *       creation — often the first use of the background class, on a thread that must
 *       not wait — would wait as long. A spare, whose start nobody waits for, sets its
 *       own (apply_priority).
 */
#include "internal.h"

#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

_Thread_local spindle_worker *spindle_tls_worker SPINDLE_TLS_INITIAL_EXEC;

static inline uint64_t xorshift(uint64_t *s) {
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

/* Single-writer counter bump: a relaxed load+store is enough for a counter only this
 * thread writes; readers (stats) use relaxed loads and want a value, not an order. */
static inline void bump(_Atomic uint64_t *c, uint64_t n) {
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
                          memory_order_relaxed);
}

void spindle_run_task(spindle_worker *w, spindle_task *t) {
    /* Tests: a held pool's worker waits here, before `executed` counts the task, so the
     * monitor sees it outside any task and counts nobody out (seams.c). */
    spindle_seam_hold(w->pool);
    /* Acquire pairs with destroy's seq_cst store of the mode; a task dequeued after the
     * pool switched to CANCEL is cancelled (it has not started). */
    int mode = atomic_load_explicit(&w->pool->shutdown, memory_order_acquire);
    bump(&w->counters.executed, 1);
    t->run(t, mode == 2 ? SPINDLE_CANCELLED : SPINDLE_RUN);
    /* executed != finished: inside a task, for spare.c's monitor. */
    bump(&w->counters.finished, 1);
}

void spindle_worker_push_slow(spindle_worker *w, spindle_task *t) {
    if (w->spare) {
        /* Nobody steals from a spare's deque (spare.c). */
        spindle_notify_one_after_push(w->pool, spindle_injector_push(&w->pool->injector, t));
        return;
    }
    /* The ring was full (it may have room again by now: push_full looks first). */
    uint32_t moved = spindle_deque_push_full(&w->deque, t, &w->pool->injector);
    if (moved) bump(&w->counters.overflowed, moved);
    spindle_notify_one_after_local_push(w->pool);
}

static spindle_task *poll_injector(spindle_worker *w) {
    spindle_pool *pool = w->pool;
    spindle_injector *q = &pool->injector;
    if (!spindle_injector_maybe_nonempty(q)) return NULL;
    int64_t len = atomic_load_explicit(&q->len, memory_order_relaxed);
    int64_t fair = len / (int64_t)pool->nworkers + 1;
    int64_t room = (int64_t)pool->deque_capacity / 4;
    int64_t free_slots = (int64_t)pool->deque_capacity - spindle_deque_len(&w->deque);
    uint32_t max = (uint32_t)(fair < room ? fair : room);
    if ((int64_t)max > free_slots) max = (uint32_t)(free_slots > 1 ? free_slots : 1);
    if (w->spare) max = 1; /* a spare keeps nothing on its deque (spare.c) */
    spindle_task *batch[64];
    if (max > 64) max = 64;
    uint32_t n = spindle_injector_pop_batch(q, batch, max);
    if (n == 0) return NULL;
    bump(&w->counters.injector_pops, n);
    /* Keep the first; push the rest oldest-last so that our LIFO pops run them in
     * submission order, while thieves take the later ones. */
    for (uint32_t i = n; i-- > 1;) spindle_deque_push(&w->deque, batch[i], q);
    if (n > 1) spindle_notify_one(pool); /* there is now something to steal */
    return batch[0];
}

/* Steals one task from a victim in `tier`, starting at a random member so that thieves
 * spread over victims. From a worker on another node it takes a batch (up to 4: one to
 * run, the rest onto our deque), since every cross-node trip moves cache lines across
 * the interconnect anyway. Sets *retry when a steal lost a race and may be worth
 * repeating. */
static spindle_task *steal_in_tier(spindle_worker *w, spindle_tier tier, bool *retry) {
    spindle_pool *pool = w->pool;
    uint32_t size = spindle_tier_size(tier);
    if (size == 0) return NULL;
    uint32_t start = (uint32_t)(xorshift(&w->rng) % size);
    for (uint32_t k = 0; k < size; k++) {
        uint32_t at = start + k < size ? start + k : start + k - size;
        spindle_worker *victim = pool->ordered[spindle_tier_at(tier, at)];
        spindle_task *t;
        spindle_steal_result r = spindle_deque_steal(&victim->deque, &t);
        if (r == SPINDLE_STEAL_RETRY) *retry = true;
        if (r != SPINDLE_STEAL_OK) continue;
        uint64_t got = 1;
        if (victim->node != w->node && !w->spare) {
            for (int extra = 0; extra < 3; extra++) {
                spindle_task *more;
                if (spindle_deque_steal(&victim->deque, &more) != SPINDLE_STEAL_OK) break;
                spindle_deque_push(&w->deque, more, &pool->injector);
                got++;
            }
        }
        bump(&w->counters.stolen, got);
        /* Several thieves may add at once: RMW. Relaxed: a statistic. */
        atomic_fetch_add_explicit(&victim->counters.stolen_from, got, memory_order_relaxed);
        return t;
    }
    return NULL;
}

/* Steals one task, nearest victims first (topology_plan.c, PL3): the worker's own tiers
 * within its node, then its node's tiers to the others, each tier whole before the
 * next. */
static spindle_task *steal_from_others(spindle_worker *w) {
    for (int attempt = 0; attempt < 2; attempt++) {
        bool retry = false;
        for (uint32_t i = 0; i < w->nlocal; i++) {
            spindle_task *t = steal_in_tier(w, w->local[i], &retry);
            if (t) return t;
        }
        for (uint32_t i = 0; i < w->nremote; i++) {
            spindle_task *t = steal_in_tier(w, w->remote[i], &retry);
            if (t) return t;
        }
        if (!retry) break;
    }
    return NULL;
}

static void found_work(spindle_worker *w) {
    if (!w->searching) return;
    w->searching = false;
    /* S2: the last searcher to find work wakes the next one — if there is more work.
     * Waking unconditionally (tokio, Go) costs the task we just found a futex wake
     * into a possibly halted vCPU before it starts, which is the whole latency of a lone
     * task on a VM. Conditional is still safe: it is the Dekker pairing of
     * park.c again — our decrement (seq_cst RMW), a full fence, then a look at the
     * queues, against a submitter's push, fence, look at the count. Either we see its
     * task and wake someone, or it sees no searcher and wakes someone. */
    if (spindle_idle_stop_searching(&w->pool->idle)) {
        atomic_thread_fence(memory_order_seq_cst);
        if (spindle_pool_has_pending_work(w->pool)) spindle_notify_one(w->pool);
    }
}

/* One search for a task, without sleeping. NULL: nothing found (sleep next), or
 * `latch` (when not NULL) was set while we searched. */
static spindle_task *find_task(spindle_worker *w, _Atomic uint32_t *latch) {
    spindle_task *t;
    if (++w->tick % 61 == 0 && (t = poll_injector(w))) return t;
    if ((t = spindle_deque_pop(&w->deque))) return t;
    if ((t = poll_injector(w))) return t;
    /* W4: deep in a join wait, no searching. */
    if (latch && spindle_worker_past_floor(w)) return NULL;
    if (!w->searching) {
        if (!spindle_idle_try_start_searching(&w->pool->idle)) return NULL;
        w->searching = true;
    }
    uint64_t deadline = 0;
    for (uint32_t round = 0;; round++) {
        if ((t = steal_from_others(w))) return t;
        if ((t = poll_injector(w))) return t;
        /* Acquire, as in spindle_worker_wait_latch. */
        if (latch && atomic_load_explicit(latch, memory_order_acquire) == SPINDLE_LATCH_SET)
            return NULL;
        /* G1 (park.c): on the CPU of the outside thread that woke us, one round only. */
        if (w->guest) return NULL;
        /* Reading the clock costs ~20 ns through the vDSO; check it every 16 rounds. */
        if ((round & 15) == 0) {
            uint64_t now = spindle_now_ns();
            if (deadline == 0)
                deadline = now + w->pool->spin_ns;
            else if (now >= deadline)
                return NULL;
            /* Give the CPU away if anything else wants it. A worker with a short slice
             * (spindle_thread_request_slice) preempts the thread that woke it; without
             * this it would keep that thread — often an event loop — off its CPU for the
             * whole search. When nothing else is runnable the yield returns at once. This
             * only works against threads of equal or higher weight: a worker at a
             * lower nice keeps the CPU through the yield, which is why a guest
             * (park.c, G1) stops after one round instead of relying on it. */
            sched_yield();
        }
        for (int i = 0; i < 32; i++) spindle_cpu_relax();
    }
}

void spindle_worker_wait_latch(spindle_worker *w, _Atomic uint32_t *latch) {
    /* Inside code that said it blocks (spare.c), the worker is counted out and must not
     * park through the idle protocol, which would count it out a second time: it
     * blocks, and spares run the work (the frame it waits for included). */
    if (atomic_load_explicit(&w->blocking_depth, memory_order_relaxed) != 0) {
        spindle_worker_block_on_latch(w, latch);
        return;
    }
    /* Tests: how deep this wait is (W4). The stack grows down. */
    if (w->stack_high) spindle_test_record_join_wait(w->stack_high - (uintptr_t)__builtin_frame_address(0));
    for (;;) {
        /* Acquire pairs with the setter's release: the thief's writes (the joined
         * half's results) are visible once we see SET. */
        if (atomic_load_explicit(latch, memory_order_acquire) == SPINDLE_LATCH_SET) break;
        spindle_task *t = find_task(w, latch);
        if (t) {
            found_work(w);
            spindle_run_task(w, t);
            continue;
        }
        if (atomic_load_explicit(latch, memory_order_acquire) == SPINDLE_LATCH_SET) break;
        uint32_t expected = SPINDLE_LATCH_UNSET;
        /* Announce that we may sleep. acq_rel: the setter's exchange reads SLEEPING and
         * wakes us; if it set the latch first, the CAS fails and we see SET (acquire). */
        if (!atomic_compare_exchange_strong_explicit(latch, &expected, SPINDLE_LATCH_SLEEPING,
                                                     memory_order_acq_rel, memory_order_acquire) &&
            expected == SPINDLE_LATCH_SET)
            break;
        spindle_idle_sleep(w, latch);
    }
    /* We may have been woken as a searcher; we are going back to our task. */
    if (w->searching) found_work(w);
}

static void set_thread_name(spindle_worker *w) {
    /* The kernel keeps 15 bytes; trim the prefix, never the index, so that `top -H` and
     * perf can tell the workers apart — and never inside a UTF-8 character: back off
     * over continuation bytes (10xxxxxx) to the start of the cut one. */
    char digits[12], name[16];
    int nd = snprintf(digits, sizeof digits, "%u", w->index);
    size_t keep = strlen(w->pool->name);
    if (keep > 15 - (size_t)nd) {
        keep = 15 - (size_t)nd;
        while (keep > 0 && ((unsigned char)w->pool->name[keep] & 0xC0) == 0x80) keep--;
    }
    memcpy(name, w->pool->name, keep);
    memcpy(name + keep, digits, (size_t)nd + 1);
    pthread_setname_np(pthread_self(), name);
}

/* Records `err` as the pool's report in `slot` unless an earlier failure (of another
 * worker, or the spawner's, spawn.c) already did: the first error wins. Relaxed: a
 * report, read after create returns — create waits for `ready`, whose release/acquire
 * orders the workers' reports before it, and makes the spawner's report itself. */
void spindle_report_first_error(_Atomic int *slot, int err) {
    int expected = 0;
    atomic_compare_exchange_strong_explicit(slot, &expected, err, memory_order_relaxed,
                                            memory_order_relaxed);
}

/* The kernel's struct sched_attr (SCHED_ATTR_SIZE_VER1), which glibc does not declare. */
typedef struct spindle_sched_attr {
    uint32_t size, sched_policy;
    uint64_t sched_flags;
    int32_t sched_nice;
    uint32_t sched_priority;
    uint64_t sched_runtime, sched_deadline, sched_period;
    uint32_t sched_util_min, sched_util_max;
} spindle_sched_attr;

/* A custom time slice (EEVDF, Linux 6.12+: sched_runtime of a fair-class task), for
 * thread `tid` (0: the calling thread), with its policy and nice passed unchanged; 0 or
 * the kernel's errno.
 * Why workers ask for one: a thread's virtual deadline is its eligible time plus its
 * slice, and a waking thread preempts the running one only if its deadline is earlier.
 * With the default slice (~3 ms), a worker woken by a submitter on the same CPU (where
 * the scheduler often places it) waits for the submitter to block; with 100 us it
 * preempts at once (the `latency` case of the benchmark). The cost is more preemption of the workers under
 * contention, which is also what lets interactive work in. Public so that the
 * benchmark's bare hand-off (`qos-under-load`'s handoff-floor) runs the same code, for
 * the calling thread. */
static int request_slice(pid_t tid, uint32_t ns) {
    spindle_sched_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.size = sizeof attr;
    attr.sched_policy = (uint32_t)sched_getscheduler(tid);
    attr.sched_nice = getpriority(PRIO_PROCESS, (id_t)tid); /* who 0: the calling thread */
    attr.sched_runtime = ns;
    return syscall(SYS_sched_setattr, tid, &attr, 0) == 0 ? 0 : errno;
}

int spindle_thread_request_slice(uint32_t ns) { return request_slice(0, ns); }

/* Sets the pool's policy (SCHED_IDLE or SCHED_BATCH) on thread `tid` (0: the caller),
 * and then its slice, which a change of policy resets; failures go to the pool's
 * reports. */
static void set_policy(spindle_pool *pool, pid_t tid) {
    struct sched_param param = {.sched_priority = 0};
    int policy = pool->requested_policy == SPINDLE_POLICY_IDLE ? SCHED_IDLE : SCHED_BATCH;
    if (sched_setscheduler(tid, policy, &param) != 0) {
        spindle_report_first_error(&pool->policy_error, errno);
        return;
    }
    if (pool->requested_slice_ns) {
        int err = request_slice(tid, pool->requested_slice_ns);
        if (err) spindle_report_first_error(&pool->slice_error, err);
    }
}

/* Applies the pool's nice value, and slice, to the calling worker thread, and records,
 * from worker 0, what it got; a spare also sets the pool's policy, which a regular
 * worker gets from the pool's creator (W7). On Linux all three are per-thread
 * attributes: setpriority(PRIO_PROCESS, tid) sets one thread's nice. */
static void apply_priority(spindle_worker *w) {
    spindle_pool *pool = w->pool;
    pid_t tid = (pid_t)syscall(SYS_gettid);
    bool own_policy = pool->requested_policy != SPINDLE_POLICY_NORMAL;
    if (own_policy && w->spare) set_policy(pool, 0);
    if (pool->requested_nice != SPINDLE_NICE_INHERIT &&
        setpriority(PRIO_PROCESS, (id_t)tid, pool->requested_nice) != 0)
        spindle_report_first_error(&pool->nice_error, errno);
    /* A custom slice is a fair-class setting: a worker left under a real-time policy
     * (a process started with `chrt -f` or `-r`, whose policy the workers inherit) has
     * none to set, and asks for none — which is not an error. A pool with a policy of
     * its own asks for the slice with the policy (set_policy), which resets it. */
    int current = sched_getscheduler(0);
    bool fair = current != SCHED_FIFO && current != SCHED_RR;
    if (!fair && !own_policy) atomic_store_explicit(&pool->slice_not_asked, true, memory_order_relaxed);
    if (pool->requested_slice_ns && fair && !own_policy) {
        int err = spindle_thread_request_slice(pool->requested_slice_ns);
        if (err) spindle_report_first_error(&pool->slice_error, err);
    }
    if (w->index == 0) {
        errno = 0;
        int nice = getpriority(PRIO_PROCESS, (id_t)tid);
        /* Relaxed: a report, ordered for its reader by `ready` (see
         * spindle_report_first_error). */
        atomic_store_explicit(&pool->effective_nice, nice, memory_order_relaxed);
        atomic_store_explicit(&pool->effective_policy, sched_getscheduler(0), memory_order_relaxed);
    }
}

void spindle_workers_take_policy(spindle_pool *pool) {
    if (pool->requested_policy == SPINDLE_POLICY_NORMAL) return;
    for (uint32_t i = 0; i < pool->nworkers; i++) {
        /* Relaxed: written by the worker before its release increment of `ready`, which
         * the caller has acquired. */
        pid_t tid = atomic_load_explicit(&pool->workers[i]->tid, memory_order_relaxed);
        set_policy(pool, tid);
    }
    pid_t first = atomic_load_explicit(&pool->workers[0]->tid, memory_order_relaxed);
    int policy = sched_getscheduler(first);
    /* Relaxed: a report, read after creation returns (stats.c). */
    if (policy >= 0) atomic_store_explicit(&pool->effective_policy, policy, memory_order_relaxed);
}

bool spindle_worker_cpus(const spindle_worker *w, cpu_set_t *set) {
    size_t size = CPU_ALLOC_SIZE(SPINDLE_MAX_CPUS);
    CPU_ZERO_S(size, set);
    if (w->npin > 0) {
        for (uint32_t k = 0; k < w->npin; k++)
            if (w->pin[k] >= 0 && w->pin[k] < SPINDLE_MAX_CPUS) CPU_SET_S((size_t)w->pin[k], size, set);
        return true;
    }
    if (!w->pool->affinity) return false;
    memcpy(set, w->pool->affinity, size);
    return true;
}

/* Restricts the thread to its planned CPUs. A failure (a plan for CPUs this machine
 * lacks, a cpuset that shrank) leaves it unpinned and is reported once per pool. */
static void apply_pinning(spindle_worker *w) {
    if (w->npin == 0) return;
    cpu_set_t *set = CPU_ALLOC(SPINDLE_MAX_CPUS);
    if (!set) return;
    size_t size = CPU_ALLOC_SIZE(SPINDLE_MAX_CPUS);
    spindle_worker_cpus(w, set);
    int rc = pthread_setaffinity_np(pthread_self(), size, set);
    CPU_FREE(set);
    if (rc) spindle_report_first_error(&w->pool->pin_error, rc);
}

/* G2 (park.c): at most one worker of a pool moves itself per this interval. */
#define SPREAD_INTERVAL_NS 10000000ull

int spindle_worker_spread(spindle_worker *w, int cpu) {
    if (w->npin == 1 || cpu < 0 || cpu >= SPINDLE_MAX_CPUS) return cpu; /* pinned: stays */
    spindle_pool *pool = w->pool;
    /* The rate limit first: one clock read, and a CAS that only one worker wins. */
    uint64_t now = spindle_now_ns();
    uint64_t last = atomic_load_explicit(&pool->spread_at, memory_order_relaxed);
    if (now - last < SPREAD_INTERVAL_NS ||
        !atomic_compare_exchange_strong_explicit(&pool->spread_at, &last, now, memory_order_relaxed,
                                                 memory_order_relaxed))
        return cpu;
    size_t size = CPU_ALLOC_SIZE(SPINDLE_MAX_CPUS);
    cpu_set_t *allowed = CPU_ALLOC(SPINDLE_MAX_CPUS), *busy = CPU_ALLOC(SPINDLE_MAX_CPUS);
    if (!allowed || !busy || !spindle_worker_cpus(w, allowed)) goto out;
    /* Where its unparked siblings last woke (relaxed hints: a stale one costs a move to
     * a CPU that turns out shared, which the kernel's balancing then sorts out). */
    CPU_ZERO_S(size, busy);
    CPU_SET_S((size_t)cpu, size, busy);
    for (uint32_t i = 0; i < pool->nworkers; i++) {
        int32_t c = atomic_load_explicit(&pool->workers[i]->cpu_hint, memory_order_relaxed);
        if (pool->workers[i] != w && c >= 0 && c < SPINDLE_MAX_CPUS) CPU_SET_S((size_t)c, size, busy);
    }
    /* The first free CPU after this one, wrapping, so that moves do not all pile onto
     * the lowest-numbered CPU. */
    for (int k = 1; k < SPINDLE_MAX_CPUS; k++) {
        int c = (cpu + k) % SPINDLE_MAX_CPUS;
        if (!CPU_ISSET_S((size_t)c, size, allowed) || CPU_ISSET_S((size_t)c, size, busy)) continue;
        /* Restricting the thread to `c` moves it there now; restoring the mask leaves it
         * there, free to be moved again by the kernel. */
        CPU_ZERO_S(size, busy);
        CPU_SET_S((size_t)c, size, busy);
        if (sched_setaffinity(0, size, busy) == 0) {
            sched_setaffinity(0, size, allowed);
            atomic_fetch_add_explicit(&pool->spreads, 1, memory_order_relaxed);
            cpu = c;
        }
        break;
    }
out:
    if (allowed) CPU_FREE(allowed);
    if (busy) CPU_FREE(busy);
    return cpu;
}

/* W4: sets w->steal_floor, the address below which this thread's stack is more than half
 * used (0: unknown, never deep); under a test floor, sets that and w->stack_high. */
static void set_steal_floor(spindle_worker *w) {
    w->steal_floor = 0;
    w->stack_high = 0;
    /* A test seam (seams.c), written before this thread was created; 0 outside debug
     * builds. */
    size_t test = spindle_seam_join_floor();
    if (test == SIZE_MAX) {
        w->steal_floor = UINTPTR_MAX;
        return;
    }
    pthread_attr_t attr;
    void *low;
    size_t size;
    if (pthread_getattr_np(pthread_self(), &attr) != 0) return;
    int rc = pthread_attr_getstack(&attr, &low, &size);
    pthread_attr_destroy(&attr);
    if (rc != 0) return;
    uintptr_t high = (uintptr_t)low + size;
    if (test != 0 && test < size) {
        w->steal_floor = high - test;
        w->stack_high = high;
        return;
    }
    w->steal_floor = (uintptr_t)low + size / 2;
}

/* W6: retirement, until the active limit is above this worker's index again. */
static void retire(spindle_worker *w) {
    spindle_pool *pool = w->pool;
    found_work(w); /* no longer a searcher (W2), with S2's hand-over */
    spindle_task *first = NULL, *last = NULL, *t;
    int64_t n = 0;
    while ((t = spindle_deque_pop(&w->deque))) {
        /* Relaxed: the chain is published by the injector's link (release). */
        if (last) atomic_store_explicit(spindle_task_link(last), t, memory_order_relaxed);
        else first = t;
        last = t;
        n++;
    }
    if (n) spindle_notify_one_after_push(pool, spindle_injector_push_chain(&pool->injector, first, last, n));
    /* Relaxed: a count for the monitor's idleness test; read stale, it only keeps the
     * monitor awake a tick longer. */
    atomic_fetch_add_explicit(&pool->retired, 1, memory_order_relaxed);
    for (;;) {
        /* Acquire pairs with the raise's release bump; the limit is read after it. */
        uint32_t seq = atomic_load_explicit(&w->retire_seq, memory_order_acquire);
        if (w->index < atomic_load_explicit(&pool->active_limit, memory_order_seq_cst)) break;
        spindle_futex_wait(&w->retire_seq, seq);
    }
    /* Running again, the worker needs watching (spare.c, MI1): the monitor may have
     * gone to sleep on a count that still had it retired. seq_cst, against the
     * monitor's announcement and second look: either that look reads the decrement,
     * or the poke reads the announcement and wakes it. */
    atomic_fetch_sub_explicit(&pool->retired, 1, memory_order_seq_cst);
    spindle_monitor_poke();
}

void *spindle_worker_main(void *arg) {
    spindle_worker *w = arg;
    spindle_pool *pool = w->pool;
    spindle_tls_worker = w;
    set_steal_floor(w);
    /* Relaxed: read by the monitor as a hint (0: not started). */
    atomic_store_explicit(&w->tid, (int32_t)syscall(SYS_gettid), memory_order_relaxed);
    set_thread_name(w);
    apply_pinning(w);
    apply_priority(w);
    if (!w->spare) {
        /* Release pairs with create's acquire: the nice report is visible once counted. */
        atomic_fetch_add_explicit(&pool->ready, 1, memory_order_release);
        spindle_futex_wake(&pool->ready, 1);
    }
    for (;;) {
        /* W6. Relaxed: the limit changes rarely; a worker that reads it late retires,
         * or resumes, one task later. */
        if (!w->spare && w->index >= atomic_load_explicit(&pool->active_limit, memory_order_relaxed)) {
            retire(w);
            continue;
        }
        spindle_task *t = find_task(w, NULL);
        if (t) {
            found_work(w);
            spindle_run_task(w, t);
            continue;
        }
        if (!spindle_idle_sleep(w, NULL)) break; /* terminated, or a spare retired */
    }
    spindle_tls_worker = NULL;
    if (w->spare) {
        /* Nothing of `w` is written after its slot went vacant, but for the thread id,
         * which a new spare of the slot may already have set: clear only our own. */
        int32_t mine = (int32_t)syscall(SYS_gettid);
        atomic_compare_exchange_strong_explicit(&w->tid, &mine, 0, memory_order_relaxed,
                                                memory_order_relaxed);
        /* Last touch of the pool (C2): shutdown frees it once this reaches 0. Release
         * pairs with its acquire. The wake may then find the word gone or reused: a
         * FUTEX_WAKE on such an address wakes nobody who cares (see join.c). */
        atomic_fetch_sub_explicit(&pool->spares_running, 1, memory_order_release);
        spindle_futex_wake(&pool->spares_running, INT_MAX);
    }
    return NULL;
}
