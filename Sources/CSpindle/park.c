/*
 * park.c — putting workers to sleep and waking them, without losing a wake-up, without
 * a thundering herd, and without burning CPU while idle.
 *
 * Two layers:
 *
 * 1. The parker: one futex word per worker (EMPTY / PARKED / NOTIFIED), the protocol of
 *    tokio's park and Rust's std thread parker. `unpark` leaves a token if the thread is
 *    not asleep yet, so an unpark that races ahead of its park is never lost (K1).
 *
 * 2. The idle accounting, after tokio's idle.rs and Go's proc.go ("spinning" threads):
 *      state = (unparked << 32) | searching        one 64-bit word, seq_cst RMWs
 *      sleepers = stack of parked worker indices     under `lock`
 *    - A worker out of local work may become a *searcher* (it steals and polls the
 *      injector for up to `spin_ns` before parking) only while 2 * searching < workers:
 *      at most half the pool spins, so a burst of work does not wake a herd (S1).
 *    - Whoever makes work available (a submit, a local push, an overflow) calls
 *      notify_one, which wakes a sleeper only if nobody is searching and somebody is
 *      parked. One searcher is enough: when a searcher finds work it stops searching,
 *      and if it was the *last* searcher and more work is pending it wakes the next
 *      one (S2), which keeps the wake-ups flowing one at a time as long as there is
 *      work to share — and costs nothing when there is not (worker.c, found_work).
 *    - A worker that parks decrements `unparked` (and `searching`, if it was one) under
 *      `lock` and pushes itself on `sleepers`; notify_one pops a sleeper and increments
 *      both counts under the same lock, so the counts and the stack always agree.
 *
 * No lost wake-up (the Dekker pairing). The danger is a submitter that sees a searcher
 * (so wakes nobody) while that searcher, having already looked at the queues, parks.
 *      submitter                             last searcher
 *      a) push the task (store)              x) RMW state: searching -= 1 (seq_cst)
 *      b) fence(seq_cst)                     y) fence(seq_cst)
 *      c) load state                         z) look at every queue once more
 *    The two fences are totally ordered. If b precedes y, the searcher's loads in z see
 *    the push from a, and it wakes a worker (itself stays parked but notifies one). If y
 *    precedes b, the submitter's load in c sees the decrement from x: with no searcher
 *    left it wakes a sleeper. Either way somebody runs the task. Only the *last*
 *    searcher needs step z: while another searcher remains, that one will find the work
 *    (S2 then keeps the chain going). Go's proc.go states the same protocol ("the
 *    spinning->non-spinning transition ... StoreLoad barrier ... check all queues").
 *
 *    S3. A worker that parks without having searched (S1 let it not: another worker
 *    was searching) does step z too when, once it has left the counts, nobody
 *    searches. The searcher it left the work to may have found a task and stopped in
 *    between, and that searcher's S2 look came while this worker still counted as
 *    unparked, so it woke nobody; if the task it found then runs long, or blocks
 *    counted out in a pool with no spare to start, the work queued behind it waits
 *    with a worker asleep. The same pairing covers it: x is this worker's RMW of the
 *    counts, and whoever published the work looked at the counts after it.
 *
 *    Outside submissions skip fence b (notify_one_after_push): their publishing step
 *    is the injector's seq_cst increment of `len` (a), and c is a seq_cst load. In the
 *    single total order S of seq_cst operations, either a precedes fence y — then the
 *    searcher's load of `len` after y sees it — or y precedes a, and then x < y < a < c
 *    in S, so c (a seq_cst load) reads x or later. The same two outcomes, one serialising
 *    instruction fewer per submission. Local deque pushes publish with a plain store
 *    and keep the fence. Tests/Models/submit_wakeup.pml checks the outside-submission
 *    form, with S1 and S2, over every interleaving of two submitters and two workers.
 *
 * Backlog (B1). The rule "wake nobody while somebody searches" trusts the searcher to
 * be running. It may not be: a searcher the kernel has placed on a busy CPU can sit
 * runnable for milliseconds (EEVDF keeps a waking thread that has used its share off
 * the CPU, and an idle CPU elsewhere pulls it only at the next balancing pass). Then
 * every other worker stays parked, since each submission sees "somebody is
 * searching", and outside submissions pile up in the injector with a CPU idle — on a
 * machine with few CPUs, thousands of tasks for milliseconds at a time, with one worker parked and
 * the searcher preempted on the submitter's CPU. So an outside submission that finds SPINDLE_BACKLOG_WAKE tasks or more already
 * queued wakes a sleeper whatever the searching count says: a running searcher drains
 * the injector in batches, so a backlog that size means the searchers are not keeping
 * up, or not running. The woken worker counts as a searcher like any other. This only
 * adds wake-ups, so the argument above is untouched; it costs nothing to check (the
 * backlog is the injector's own fetch_add result) and, while searchers keep up,
 * nothing at all. Rejected: a timed park for workers that park while another searches
 * (bounds the stall by the timeout, and wakes idle workers for nothing), and timing
 * the searchers from the submit path (a clock read per submission).
 *
 * Guests (G1). A worker woken by a thread outside the pool that finds itself running
 * on that thread's CPU — always so for the per-CPU userInteractive set, which picks the
 * sleeper pinned there (pick_sleeper_locked), and sometimes so wherever the kernel
 * places the wakee — and whose nice is lower than that thread's, is a guest there:
 * after the work it finds, it searches once and parks instead of spinning. Its spin
 * could only delay the thread that woke it, which is usually the producer of any
 * further work and often an event loop, and the yield in the search loop does not hand
 * the CPU back: EEVDF's sched_yield moves the yielder's deadline by one of its slices
 * (100 µs asked for, worth less virtual time at a negative nice), so a higher-weight
 * worker stays the earliest eligible deadline through every yield, and the submitter
 * gets its CPU back only when the whole spin is over. With this rule it gets it back
 * when the task is done (the `qos-under-load` case of the benchmark).
 * Why only against a lower-ranked waker: at equal weight the yield does hand the CPU
 * back, and the spinning searcher is what keeps a streaming producer from waking a
 * sleeper per submission (S1). Applied to the default pool, the rule would multiply the
 * parks of a streaming producer's pool and slow it down. The worker loses nothing that the spin would have found: the
 * work it would have waited for comes from the thread it is keeping off the CPU, or
 * from other CPUs, whose own workers it wakes. Only the spin is shortened — a spin of
 * any length, down to the configurable minimum, is covered by the argument above.
 * `waker_cpu` is written by the waker under `lock` and read by the wakee under it.
 *
 * Spreading (G2). A worker that pushes work on its own deque — a fork, a parallel
 * loop's helpers, a task spawned by a task — and wakes a sleeper to steal it means the
 * two to run in parallel. The kernel places the woken thread as it wakes, and when the
 * other CPUs look busy at that instant (the thread that started the burst, say, has
 * not blocked yet) it may put it beside its waker. Its balancing would move one of the
 * two to a CPU that then goes idle, but not soon: both have just run, so both count as
 * cache hot, and a burst of forked work is over before the balancer gives up on that.
 * The burst then runs at half speed on two CPUs from start to end, which with few CPUs
 * is a common outcome, not a rare one. So a worker woken by a sibling's push that
 * finds itself on that sibling's CPU moves itself, with two sched_setaffinity calls
 * (restrict, then restore), to the next CPU it may use on which no unparked sibling
 * last woke (`cpu_hint`), if there is one. A worker pinned to one CPU stays. The move
 * costs two system calls and a migration, so a pool makes at most one per 10 ms
 * (`spread_at`): a burst needs one, and anything longer-lived the kernel's balancing
 * sorts out. Rejected: spreading on every wake by a sibling (S2's, a batch's). Those
 * come from workers draining work submitted from outside, on CPUs shared with the
 * submitting threads, and moving a worker there lands it beside one of those instead,
 * which slows the hand-offs more than the move gains (docs/performance.md,
 * "Spreading"). Nor on the second task a worker finds after a thread outside the pool
 * woke it onto that thread's CPU, a stream such as a serial queue's adding thread
 * makes: with the move, the queue's blocks took longer, not less (the same section).
 * And pinning each worker to a CPU of its own, which prevents the collision outright,
 * is `Pinning.core`, not the default, for the reason its documentation gives.
 *
 * Wakes on busy CPUs. When every CPU is busy — a server's event loops and this pool's
 * workers together outnumber the CPUs, or another process holds one — a wake-up made
 * for parallelism (S2's, or a worker's after taking a batch from the injector) puts the
 * woken worker on its waker's CPU, where its short slice preempts the waker: two
 * context switches, and nothing runs in parallel that did not before. Rejected:
 * skipping such wakes while recent ones have landed on their waker's CPU. Where the
 * CPUs are busy with threads that come and go, as a cooperative pool's are while its
 * tasks await offloads, the woken worker moves to the first CPU that frees up and the
 * wake pays for itself; where they are held by threads that never sleep, it does not.
 * In both, the wakes land on their waker's CPU, so where a wake lands does not tell
 * them apart. And a skipped wake is one that a task spinning on the queued work would
 * wait for until something else woke a worker: the monitor (spare.c) sees only
 * workers asleep in a task, not spinning ones.
 *
 * Idle CPU. A parked worker is blocked in FUTEX_WAIT and consumes nothing; a searcher
 * spins for at most `spin_ns` (50 µs by default: on a VM, a wake that has to start a
 * halted virtual CPU takes tens of microseconds; see "Latency" in docs/performance.md)
 * and then parks, so a short spin hides the wake for bursts. There are no timers: an
 * idle pool is fully asleep within one spin period.
 */
#include "internal.h"

#include <errno.h>
#include <sched.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

enum { PARK_EMPTY = 0, PARK_PARKED = 1, PARK_NOTIFIED = 2 };

#define SEARCHING_ONE SPINDLE_SEARCHING_ONE
#define UNPARKED_ONE SPINDLE_UNPARKED_ONE
#define SEARCHING(s) SPINDLE_SEARCHING(s)
#define UNPARKED(s) SPINDLE_UNPARKED(s)

uint64_t spindle_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void spindle_futex_wait(_Atomic uint32_t *word, uint32_t expected) {
    /* Private futex: the word is never shared across processes. EINTR/EAGAIN are
     * spurious returns; every caller re-checks its condition in a loop. */
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

void spindle_futex_wait_timeout(_Atomic uint32_t *word, uint32_t expected, uint64_t ns) {
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000u), .tv_nsec = (long)(ns % 1000000000u)};
    /* A relative timeout (FUTEX_WAIT); spurious returns as above. */
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_PRIVATE, expected, &ts, NULL, 0);
}

void spindle_futex_wake(_Atomic uint32_t *word, int count) {
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE_PRIVATE, count, NULL, NULL, 0);
}

/* ---- the parker (K1) ---------------------------------------------------------------- */

void spindle_parker_park(spindle_parker *p) {
    uint32_t expected = PARK_NOTIFIED;
    /* Acquire pairs with unpark's release exchange: whatever the waker did before
     * unparking is visible once we consume its token. */
    if (atomic_compare_exchange_strong_explicit(&p->state, &expected, PARK_EMPTY,
                                                memory_order_acquire, memory_order_relaxed))
        return;
    expected = PARK_EMPTY;
    /* Relaxed on success: announcing sleep publishes nothing; the futex re-checks the
     * word in the kernel under its own lock. On failure the state is NOTIFIED (only we
     * write PARKED/EMPTY): consume the token with acquire, as above. */
    if (!atomic_compare_exchange_strong_explicit(&p->state, &expected, PARK_PARKED,
                                                 memory_order_relaxed, memory_order_relaxed)) {
        atomic_exchange_explicit(&p->state, PARK_EMPTY, memory_order_acquire);
        return;
    }
    for (;;) {
        spindle_futex_wait(&p->state, PARK_PARKED);
        expected = PARK_NOTIFIED;
        if (atomic_compare_exchange_strong_explicit(&p->state, &expected, PARK_EMPTY,
                                                    memory_order_acquire, memory_order_relaxed))
            return;
        /* Spurious wake-up (signal, stale wake): sleep again. */
    }
}

bool spindle_parker_park_timeout(spindle_parker *p, uint64_t ns) {
    uint32_t expected = PARK_NOTIFIED;
    /* Orderings as in spindle_parker_park. */
    if (atomic_compare_exchange_strong_explicit(&p->state, &expected, PARK_EMPTY,
                                                memory_order_acquire, memory_order_relaxed))
        return true;
    expected = PARK_EMPTY;
    if (!atomic_compare_exchange_strong_explicit(&p->state, &expected, PARK_PARKED,
                                                 memory_order_relaxed, memory_order_relaxed)) {
        atomic_exchange_explicit(&p->state, PARK_EMPTY, memory_order_acquire);
        return true;
    }
    uint64_t deadline = spindle_now_ns() + ns;
    for (;;) {
        uint64_t now = spindle_now_ns();
        if (now < deadline) spindle_futex_wait_timeout(&p->state, PARK_PARKED, deadline - now);
        expected = PARK_NOTIFIED;
        if (atomic_compare_exchange_strong_explicit(&p->state, &expected, PARK_EMPTY,
                                                    memory_order_acquire, memory_order_relaxed))
            return true;
        if (spindle_now_ns() >= deadline) {
            /* Give up: PARKED -> EMPTY, unless an unpark lands now (then take its token).
             * Acquire on failure, as when consuming a token (and so on success too, which
             * C11 requires to be at least as strong). */
            expected = PARK_PARKED;
            if (atomic_compare_exchange_strong_explicit(&p->state, &expected, PARK_EMPTY,
                                                        memory_order_acquire, memory_order_acquire))
                return false;
            atomic_exchange_explicit(&p->state, PARK_EMPTY, memory_order_acquire);
            return true;
        }
    }
}

void spindle_parker_unpark(spindle_parker *p) {
    /* Release pairs with park's acquire. The exchange leaves the token even if the
     * thread has not gone to sleep yet (K1); only a thread actually in PARKED needs the
     * syscall. */
    if (atomic_exchange_explicit(&p->state, PARK_NOTIFIED, memory_order_release) == PARK_PARKED)
        spindle_futex_wake(&p->state, 1);
}

/* ---- the idle accounting (S1-S3) ------------------------------------------------------ */

int spindle_idle_init(spindle_idle *idle, uint32_t nworkers, uint32_t capacity) {
    idle->sleepers = calloc(capacity, sizeof(uint32_t));
    if (!idle->sleepers) return ENOMEM;
    idle->nsleepers = 0;
    idle->task_sleepers = 0;
    idle->nworkers = nworkers;
    /* Every worker starts unparked and not searching; each parks on its own. */
    atomic_init(&idle->state, (uint64_t)nworkers << 32);
    int rc = pthread_mutex_init(&idle->lock, NULL);
    if (rc) {
        free(idle->sleepers);
        idle->sleepers = NULL; /* spindle_idle_destroy may still be called */
    }
    return rc;
}

void spindle_idle_destroy(spindle_idle *idle) {
    pthread_mutex_destroy(&idle->lock);
    free(idle->sleepers);
}

bool spindle_idle_try_start_searching(spindle_idle *idle) {
    /* seq_cst load then RMW, as tokio: the bound (S1) is a heuristic, a racy overshoot by
     * one or two searchers is harmless; the RMW itself must be seq_cst because the
     * searching count takes part in the Dekker argument above. */
    uint64_t s = atomic_load_explicit(&idle->state, memory_order_seq_cst);
    if (2 * SEARCHING(s) >= idle->nworkers) return false;
    atomic_fetch_add_explicit(&idle->state, SEARCHING_ONE, memory_order_seq_cst);
    return true;
}

bool spindle_idle_stop_searching(spindle_idle *idle) {
    /* seq_cst: step x of the Dekker pairing when it is the last searcher. */
    uint64_t prev = atomic_fetch_sub_explicit(&idle->state, SEARCHING_ONE, memory_order_seq_cst);
    return SEARCHING(prev) == 1;
}

/* spindle_notify_one and spindle_notify_one_after_push (the fast paths: should a new
 * piece of work wake a sleeper? nobody searching, somebody parked) are inline in
 * internal.h; they call spindle_wake_one below. */

/* Which sleeper to wake: the most recently parked (LIFO: its cache is the warmest) —
 * except that a submission from outside the pool prefers a sleeper pinned to the
 * submitting thread's own CPU, when the pool pins one worker per CPU.
 *
 * Why: on a VM a thread woken onto another vCPU waits for an inter-processor
 * interrupt, and when that vCPU is busy (say, with background work this wake-up is
 * meant to preempt) the wake-up is several times slower, with a long tail. Woken on
 * the submitter's own CPU it preempts the submitter there at once (the
 * `qos-under-load` case in docs/performance.md). The price is the submitter's
 * CPU for the length of the task, which is what a high-priority class asks for — the
 * userInteractive worker set is pinned per CPU for exactly this (QoSPools.swift).
 * Local pushes (a worker spawning work) never get the preference: the sleeper on the
 * pusher's CPU would only compete with the pusher. */
static uint32_t pick_sleeper_locked(spindle_pool *pool, int prefer_cpu) {
    spindle_idle *idle = &pool->idle;
    uint32_t pick = idle->nsleepers - 1;
    /* A spare only when no worker of the pool's own sleeps: what a spare spawns goes
     * through the injector (spare.c), and an idle spare should be left to exit. */
    /* Nor a worker above the active limit (worker.c, W6), which would only retire:
     * one of the active ones, when any sleeps. Relaxed: a stale limit costs one wake. */
    uint32_t limit = atomic_load_explicit(&pool->active_limit, memory_order_relaxed);
    const spindle_worker *top = pool->workers[idle->sleepers[pick]];
    if (top->spare || top->index >= limit) {
        for (uint32_t k = idle->nsleepers; k-- > 0;) {
            const spindle_worker *c = pool->workers[idle->sleepers[k]];
            if (!c->spare && c->index < limit) {
                pick = k;
                break;
            }
        }
    }
    if (prefer_cpu >= 0 && pool->pinned_per_cpu) {
        for (uint32_t k = 0; k < idle->nsleepers; k++) {
            const spindle_worker *c = pool->workers[idle->sleepers[k]];
            if (c->npin == 1 && c->pin[0] == prefer_cpu && (c->spare || c->index < limit)) {
                pick = k;
                break;
            }
        }
    }
    uint32_t i = idle->sleepers[pick];
    idle->sleepers[pick] = idle->sleepers[--idle->nsleepers];
    return i;
}

/* Takes a sleeper off the stack as a searcher and does its accounting. Under the lock,
 * with nsleepers > 0. `prefer_cpu`: pick the sleeper pinned to that CPU, if any (-1:
 * the most recent sleeper). `guest_cpu`: the CPU on which the woken worker would be a
 * guest (G1), or -1. `pusher_cpu`: the CPU of the worker whose push made the wake (G2),
 * or -1. */
static spindle_worker *wake_locked(spindle_pool *pool, int prefer_cpu, int guest_cpu, int pusher_cpu) {
    spindle_idle *idle = &pool->idle;
    uint32_t i = pick_sleeper_locked(pool, prefer_cpu);
    spindle_worker *w = pool->workers[i];
    w->in_sleepers = false;
    w->woken_searching = true;
    w->waker_cpu = guest_cpu;
    w->pusher_cpu = pusher_cpu;
    if (w->waiting_in_task) idle->task_sleepers--;
    /* seq_cst RMW: the woken worker is a searcher from this instant, so no other
     * notifier wakes a second one for the same work (S1, S2). */
    atomic_fetch_add_explicit(&idle->state, SEARCHING_ONE | UNPARKED_ONE, memory_order_seq_cst);
    return w;
}

/* G1: does this pool's workers' nice outrank the calling thread's, so that their
 * sched_yield would not hand the CPU back to it? The caller's nice is read once per
 * thread (getpriority with who 0 is the calling thread's on Linux) and cached: a
 * thread that changes its nice afterwards only gets a stale answer to a performance
 * question. Relaxed load: the pool's figure is written once, before creation returns. */
static bool outranks_caller(spindle_pool *pool) {
    static _Thread_local int caller_nice_plus_64; /* 0: not read yet */
    if (caller_nice_plus_64 == 0) {
        errno = 0;
        int nice = getpriority(PRIO_PROCESS, 0);
        caller_nice_plus_64 = (nice == -1 && errno ? 0 : nice) + 64;
    }
    return atomic_load_explicit(&pool->effective_nice, memory_order_relaxed) < caller_nice_plus_64 - 64;
}

/* Unparks a worker taken off the stack by wake_locked, then pokes the monitor, which
 * may be asleep because every pool was parked (spare.c, MI1): the poke comes after
 * wake_locked's seq_cst RMW, so the monitor either sees this worker unparked or is
 * woken. The worker goes first because the kernel places each thread as it wakes:
 * a monitor woken first is queued on the waker's CPU, and the worker, which would
 * have run there as soon as the waker blocked, is sent instead to the other CPU,
 * and when that CPU is idle, waking it is the slowest start there is (on a VM, the
 * hypervisor has to wake a halted virtual CPU: tens of microseconds). Poking after
 * the worker costs the monitor, not the task, that placement. */
static void wake_then_poke(spindle_worker *w) {
    spindle_parker_unpark(&w->parker);
    spindle_monitor_poke();
}

/* spindle_wake_one and spindle_wake_one_for_push. */
static void wake_one(spindle_pool *pool, bool from_outside, bool from_push) {
    spindle_idle *idle = &pool->idle;
    spindle_worker *w = NULL, *spare = NULL;
    bool guest = from_outside && outranks_caller(pool);
    int cpu = guest || (from_outside && pool->pinned_per_cpu) || from_push ? sched_getcpu() : -1;
    int guest_cpu = guest ? cpu : -1;
    int pusher_cpu = from_push ? cpu : -1;
    pthread_mutex_lock(&idle->lock);
    /* Re-check under the lock: the counts only change in our favour under it. */
    if (spindle_should_wake(idle, atomic_load_explicit(&idle->state, memory_order_relaxed))) {
        if (idle->nsleepers > 0)
            w = wake_locked(pool, from_push ? -1 : cpu, guest_cpu, pusher_cpu);
        else /* nobody parked: workers are blocked in tasks (spare.c) */
            spare = spindle_claim_spare_locked(pool);
    }
    pthread_mutex_unlock(&idle->lock);
    if (w) wake_then_poke(w);
    if (spare) spindle_start_spare(pool, spare);
}

void spindle_wake_one(spindle_pool *pool, bool from_outside) { wake_one(pool, from_outside, false); }

void spindle_wake_one_for_push(spindle_pool *pool) {
    /* A spare pushes to the injector, not its deque (spare.c); and only a worker of this
     * pool pushes on a deque of it. */
    wake_one(pool, false, true);
}

void spindle_wake_for_backlog(spindle_pool *pool) {
    spindle_idle *idle = &pool->idle;
    spindle_worker *w = NULL;
    int guest_cpu = outranks_caller(pool) ? sched_getcpu() : -1;
    pthread_mutex_lock(&idle->lock);
    if (idle->nsleepers > 0) w = wake_locked(pool, -1, guest_cpu, -1);
    pthread_mutex_unlock(&idle->lock);
    if (w) wake_then_poke(w);
}

void spindle_notify_all(spindle_pool *pool) {
    spindle_idle *idle = &pool->idle;
    pthread_mutex_lock(&idle->lock);
    uint32_t n = idle->nsleepers;
    for (uint32_t k = 0; k < n; k++) {
        spindle_worker *w = pool->workers[idle->sleepers[k]];
        w->in_sleepers = false;
        w->woken_searching = false;
        if (w->waiting_in_task) idle->task_sleepers--;
    }
    idle->nsleepers = 0;
    atomic_fetch_add_explicit(&idle->state, (uint64_t)n * UNPARKED_ONE, memory_order_seq_cst);
    pthread_mutex_unlock(&idle->lock);
    /* Unpark everyone, including workers that were not in the list (they are between
     * checks and will find the token or the flag that made us call this), spares
     * included. Acquire pairs with the release that published each spare slot. */
    uint32_t nslots = atomic_load_explicit(&pool->nslots, memory_order_acquire);
    for (uint32_t i = 0; i < nslots; i++) spindle_parker_unpark(&pool->workers[i]->parker);
}

bool spindle_pool_has_pending_work(spindle_pool *pool) {
    if (spindle_injector_maybe_nonempty(&pool->injector)) return true;
    for (uint32_t i = 0; i < pool->nworkers; i++)
        if (spindle_deque_len(&pool->workers[i]->deque) > 0) return true;
    return false;
}

/* Termination of a shutting-down pool (see pool.c, shutdown step 4). Called under the
 * lock by a worker that has just registered as parked from the main loop. */
static bool quiescent_locked(spindle_pool *pool) {
    /* seq_cst, both: a submitter reserves its place in the injector's `len` (seq_cst)
     * before it reads `shutdown` (seq_cst). If it read 0 there, its reservation
     * precedes the shutdown CAS in the total order, which precedes our load of
     * `shutdown`, which precedes our load of `len`: we read the reservation or a later
     * value, and `len` comes back to 0 only once its task has been popped (J3), so we
     * do not terminate before that task has run or been cancelled; its submitter's
     * notify after the push, or the worker that pops it, keeps the pool going.
     * Without this check a worker could declare quiescence while a submitter that had
     * passed its shutdown check was still pushing, and its task was lost
     * (testSubmitsRacingShutdownAreRunOrRefusedNeverLost). */
    if (atomic_load_explicit(&pool->shutdown, memory_order_seq_cst) == 0) return false;
    if (atomic_load_explicit(&pool->injector.len, memory_order_seq_cst) != 0) return false;
    uint64_t s = atomic_load_explicit(&pool->idle.state, memory_order_relaxed);
    /* A worker counted out as blocked (spare.c, C3) is inside a task. */
    if (UNPARKED(s) != 0 || pool->idle.task_sleepers != 0 || pool->blocked != 0) return false;
    return !spindle_pool_has_pending_work(pool);
}

/* Takes a worker parked in a join wait off the sleeper stack and counts it unparked
 * (not searching). Under the lock. */
static void unlist_task_sleeper_locked(spindle_idle *idle, spindle_worker *w) {
    for (uint32_t k = 0; k < idle->nsleepers; k++) {
        if (idle->sleepers[k] == w->index) {
            idle->sleepers[k] = idle->sleepers[--idle->nsleepers];
            break;
        }
    }
    w->in_sleepers = false;
    idle->task_sleepers--;
    /* seq_cst: the accounting RMWs all take part in the Dekker argument. */
    atomic_fetch_add_explicit(&idle->state, UNPARKED_ONE, memory_order_seq_cst);
}

/* Counts worker `w` out of `unparked` (and of `searching`, if it searched) and puts it
 * on the sleeper stack. Under the lock. Returns whether it leaves nobody searching, and
 * so has step z to do (S3). */
static inline bool list_sleeper_locked(spindle_pool *pool, spindle_worker *w, bool was_searching,
                                       _Atomic uint32_t *latch) {
    spindle_idle *idle = &pool->idle;
    /* A worker the monitor counted out is already missing from `unparked` (spare.c). */
    bool counted_out = spindle_uncount_parking_locked(pool, w);
    uint64_t dec = (counted_out ? 0 : UNPARKED_ONE) | (was_searching ? SEARCHING_ONE : 0);
    /* seq_cst: step x of the Dekker pairing. */
    uint64_t prev = atomic_fetch_sub_explicit(&idle->state, dec, memory_order_seq_cst);
    idle->sleepers[idle->nsleepers++] = w->index;
    w->in_sleepers = true;
    w->waker_cpu = -1; /* until a waker from outside the pool says otherwise (G1) */
    w->pusher_cpu = -1; /* until a pushing sibling says otherwise (G2) */
    /* Relaxed: a hint for siblings (G2). */
    atomic_store_explicit(&w->cpu_hint, -1, memory_order_relaxed);
    w->waiting_in_task = latch != NULL;
    if (latch) idle->task_sleepers++;
    /* Step z falls to whoever leaves nobody searching: the last searcher, and also a
     * worker that did not search because another did, if that one has stopped since
     * (S3). */
    return SEARCHING(prev) == (was_searching ? 1u : 0u);
}

/* Worker `w`, taken off the sleeper stack by a waker that did its accounting, takes
 * up what the wake said: searching, a guest on its waker's CPU (G1), moved off its
 * pusher's (G2). */
static inline void take_wake(spindle_worker *w, int waker_cpu, int pusher_cpu) {
    w->searching = w->woken_searching;
    int cpu = sched_getcpu();
    /* G1: are we sharing a CPU with the outside thread that woke us? */
    w->guest = waker_cpu >= 0 && cpu == waker_cpu;
    /* G2: with the sibling that pushed the work we were woken for? */
    if (pusher_cpu >= 0 && cpu == pusher_cpu) cpu = spindle_worker_spread(w, cpu);
    /* Relaxed: a hint for siblings (G2). */
    atomic_store_explicit(&w->cpu_hint, cpu, memory_order_relaxed);
}

bool spindle_idle_sleep(spindle_worker *w, _Atomic uint32_t *latch) {
    spindle_pool *pool = w->pool;
    spindle_idle *idle = &pool->idle;
    /* Nodes this worker freed go back to their submitters before it sleeps (nodes.c,
     * N4), not when it next runs. */
    spindle_task_cache_flush();
    bool was_searching = w->searching;
    w->searching = false;
    w->guest = false;

    pthread_mutex_lock(&idle->lock);
    bool nobody_searching = list_sleeper_locked(pool, w, was_searching, latch);
    if (!latch && quiescent_locked(pool)) {
        /* Shutdown step 4: everyone is parked outside any task and nothing is queued;
         * no work can appear any more. Release every sleeper. Release store pairs with
         * the workers' acquire loads of `terminated`. */
        atomic_store_explicit(&pool->terminated, true, memory_order_release);
        pthread_mutex_unlock(&idle->lock);
        spindle_notify_all(pool);
        return false;
    }
    pthread_mutex_unlock(&idle->lock);
    /* Single writer (this worker): a relaxed load+store, no RMW needed. */
    atomic_store_explicit(&w->counters.parked,
                          atomic_load_explicit(&w->counters.parked, memory_order_relaxed) + 1,
                          memory_order_relaxed);

    if (nobody_searching) {
        /* Steps y and z: we leave nobody searching; look at every queue once more. */
        atomic_thread_fence(memory_order_seq_cst);
        if (spindle_pool_has_pending_work(pool)) spindle_notify_one(pool);
    }

    for (;;) {
        if (latch) {
            /* Acquire pairs with the setter's release exchange. */
            uint32_t ls = atomic_load_explicit(latch, memory_order_acquire);
            if (ls == SPINDLE_LATCH_SET) break;
        }
        if (w->spare && !latch) {
            /* A spare waits for work `spare_idle_ns`, then exits, if no waker has taken
             * it off the list meanwhile (spare.c). */
            if (!spindle_parker_park_timeout(&w->parker, pool->spare_idle_ns)) {
                pthread_mutex_lock(&idle->lock);
                bool retire = w->in_sleepers;
                if (retire) spindle_retire_spare_locked(pool, w);
                pthread_mutex_unlock(&idle->lock);
                if (retire) return false;
            }
        } else {
            spindle_parker_park(&w->parker);
        }
        if (!latch && atomic_load_explicit(&pool->terminated, memory_order_acquire)) return false;
        pthread_mutex_lock(&idle->lock);
        bool still_listed = w->in_sleepers;
        int waker_cpu = w->waker_cpu;
        int pusher_cpu = w->pusher_cpu;
        pthread_mutex_unlock(&idle->lock);
        if (!still_listed) {
            /* A waker took us off the list and did the accounting for us. */
            take_wake(w, waker_cpu, pusher_cpu);
            return true;
        }
        /* Still listed: a spurious wake, a stale token, or (join waits) a latch that was
         * set by a thread that has not reached spindle_idle_wake_latch_waiter yet. */
        if (latch && atomic_load_explicit(latch, memory_order_acquire) == SPINDLE_LATCH_SET) break;
    }
    /* Our latch is set: take ourselves off the list, unless a waker just did. */
    pthread_mutex_lock(&idle->lock);
    if (w->in_sleepers) {
        unlist_task_sleeper_locked(idle, w);
        w->searching = false;
    } else {
        w->searching = w->woken_searching;
    }
    pthread_mutex_unlock(&idle->lock);
    return true;
}

void spindle_idle_wake_latch_waiter(spindle_worker *w) {
    spindle_idle *idle = &w->pool->idle;
    /* Do the waiter's accounting before it runs again, so that the pool never looks
     * quiescent (everyone parked, nothing queued) while a task is about to resume on it:
     * that would let a shutting-down pool terminate under a running task. */
    pthread_mutex_lock(&idle->lock);
    /* Only a worker parked in a join wait. The waiter may have seen its latch set on
     * its own (a spurious wake), left the wait before this call, and parked again in
     * its main loop: unlisting it then would count a task sleeper that is not one
     * (task_sleepers wraps, and a shutting-down pool never looks quiescent) and leave
     * it unparked in the count while it sleeps. The unpark below is then a stale
     * token, which a parked worker absorbs (spindle_idle_sleep, "still listed"). */
    if (w->in_sleepers && w->waiting_in_task) {
        unlist_task_sleeper_locked(idle, w);
        w->woken_searching = false;
    }
    pthread_mutex_unlock(&idle->lock);
    spindle_parker_unpark(&w->parker);
}
