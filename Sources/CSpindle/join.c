/*
 * join.c — fork-join frames, latches and the parallel loop.
 *
 * A latch is one 32-bit word: UNSET -> (SLEEPING) -> SET. The waiter announces that it
 * may sleep with a CAS UNSET -> SLEEPING; the setter exchanges in SET and, if it read
 * SLEEPING, wakes the waiter. Both are RMWs on the same word, so they are totally
 * ordered: either the waiter's CAS fails because the latch is already SET, or the
 * setter sees SLEEPING and wakes it. No wake-up is lost (L1).
 *
 * How the setter wakes the waiter depends on who waits:
 *   - a worker of the pool (the common case: the joiner is a worker): the frame records
 *     the worker at fork time, before the frame is published, and the setter wakes
 *     that worker through the idle protocol (spindle_idle_wake_latch_waiter). The worker
 *     struct lives as long as the pool, so touching it after the exchange is safe even
 *     though the frame itself may already be gone (L2); by then the worker may have
 *     left the wait and be parked elsewhere, which the wake checks;
 *   - a thread outside the pool: it sleeps on the latch word with FUTEX_WAIT and the
 *     setter calls FUTEX_WAKE on it after the exchange. The waiter may wake spuriously,
 *     see SET and return (ending the frame's lifetime) before that call: the setter then
 *     issues a FUTEX_WAKE for an address nobody waits on, or on which some later waiter
 *     sleeps. That is harmless: the setter writes nothing after the exchange, and every
 *     futex waiter re-checks its word after waking (glibc's mutex unlock and Rust's
 *     Futex-based Once make the same trade).
 *
 * A thread outside the pool spins briefly on the latch before it sleeps, but not while
 * every worker of the pool it waits on is awake (L3, latch_wait_external): the spin
 * would then take CPU time from the pool's work, usually from the very worker running
 * the awaited half. L3 only shortens a spin; what the waiter does after it is L1.
 *
 * Model: Tests/Models/join_wait.pml checks L1 and L2 for a worker that waits, against the
 * setter and wakes from elsewhere: no lost wake-up, and the idle accounting true
 * whether the setter finds the waiter in its wait or already parked in its main loop.
 *
 * Join frames. spindle_fork pushes the frame on the worker's own deque (or, from
 * outside the pool, on the injector; past a worker's stack floor, nowhere: worker.c,
 * W4). spindle_join pops the deque until it meets the frame (true: the caller runs it
 * inline) or the deque runs dry (the frame was stolen or overflowed: wait for the
 * latch while running other work). Tasks found above the frame — ones the forked half
 * submitted — are simply run: they are ordinary work. A frame always runs when
 * dequeued, even by a pool that is cancelling: the task that forked it is running and
 * needs its result.
 *
 * Swift's `join` enters through spindle_swift_fork and spindle_swift_join, declared
 * with clang's `swiftcall`: each receives the offered closure as the two words Swift
 * passes it in, and calls it as Swift would. The frame borrows those words — Swift
 * passes the same closure to both calls, so it outlives the frame — which is what keeps
 * a Swift fork free of allocation and reference counting (the reasons are in
 * spindle.h). The other half is a plain Swift call between the two, and so is the
 * offered half when the join finds it still queued: the join says so, and the caller
 * runs it.
 */
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <time.h>

enum { FRAME_INLINE = 0, FRAME_LOCAL = 1, FRAME_REMOTE = 2 };

static void latch_wait_sleeping(_Atomic uint32_t *latch, spindle_pool *pool);

static inline _Atomic uint32_t *frame_latch(spindle_join_frame *f) {
    return (_Atomic uint32_t *)(void *)&f->spindle_state;
}

_Static_assert(sizeof(_Atomic uint32_t) == sizeof(uint32_t), "atomic u32 size");

static void latch_set(_Atomic uint32_t *latch, spindle_worker *waiter) {
    /* acq_rel: release publishes the work done before setting (the joined half's
     * results) to the waiter's acquire load; acquire orders our read of SLEEPING after
     * the waiter's announcement. `waiter` was read before the exchange (L2). */
    if (atomic_exchange_explicit(latch, SPINDLE_LATCH_SET, memory_order_acq_rel) ==
        SPINDLE_LATCH_SLEEPING) {
        if (waiter) {
            /* A test seam (seams.c): 0, and compiled away, outside debug builds. */
            uint64_t delay = spindle_seam_latch_wake_delay();
            if (delay) {
                struct timespec ts = {(time_t)(delay / 1000000000u), (long)(delay % 1000000000u)};
                nanosleep(&ts, NULL);
            }
            spindle_idle_wake_latch_waiter(waiter);
        } else {
            spindle_futex_wake(latch, 1);
        }
    }
}

/* An outside thread waits: spin briefly (the other half is often nearly done), then
 * sleep on the latch word itself. A worker of another pool (a cross-pool wait) does the
 * same inside spindle_blocking_begin/end, so that its own pool runs a spare meanwhile
 * and cannot deadlock on work queued behind it (spare.c). `pool`: the pool the awaited
 * work went to, when the waiter knows it (NULL for a stand-alone latch).
 *
 * The spin stops early once every worker of `pool` is awake (L3): the pool then has
 * the CPUs it was sized for busy with its work, one of them the awaited work itself,
 * and a spinning waiter could only take time from one of them. That is the usual
 * course of a `run` from outside whose work forks: the kernel wakes the worker on its
 * waker's CPU, where it preempts the waiter at once, and the waiter gets that CPU back
 * for its spin while the worker runs the work and its forks have woken the others. A waiter whose
 * pool has a worker parked spins its full time, and so does one that cannot tell (a
 * stand-alone latch). Go's scheduler has a like rule for its threads (proc.go): one
 * spins for work only on a processor that has nothing else to run.
 * Rejected: a spin that yields the CPU every few iterations. It hands the CPU back to
 * a worker that shares it, but also to any other thread there, which then keeps it
 * for its slice while the awaited work may be done: a wait on a busy machine could
 * last that much longer. */
static void latch_wait_external(_Atomic uint32_t *latch, spindle_pool *pool) {
    if (spindle_tls_worker) {
        /* Acquire pairs with latch_set's release. */
        if (atomic_load_explicit(latch, memory_order_acquire) == SPINDLE_LATCH_SET) return;
        spindle_blocking_begin();
        latch_wait_sleeping(latch, pool);
        spindle_blocking_end();
        return;
    }
    latch_wait_sleeping(latch, pool);
}

/* L3: whether every worker `pool` may run (its active limit, CG6) is awake — running
 * or searching, not parked; blocked workers are counted out, and retired ones are
 * counted awake but run nothing (worker.c, W6). Relaxed loads: a hint that ends a
 * spin early, which a stale value only makes a little longer or shorter. */
static bool pool_all_awake(spindle_pool *pool) {
    uint64_t s = atomic_load_explicit(&pool->idle.state, memory_order_relaxed);
    uint32_t retired = atomic_load_explicit(&pool->retired, memory_order_relaxed);
    uint32_t active = atomic_load_explicit(&pool->active_limit, memory_order_relaxed);
    return SPINDLE_UNPARKED(s) >= active + retired;
}

static void latch_wait_sleeping(_Atomic uint32_t *latch, spindle_pool *pool) {
    uint64_t deadline = 0;
    for (uint32_t i = 0;; i++) {
        /* Acquire pairs with latch_set's release. */
        if (atomic_load_explicit(latch, memory_order_acquire) == SPINDLE_LATCH_SET) return;
        if ((i & 63) == 0) {
            uint64_t now = spindle_now_ns();
            if (!deadline)
                deadline = now + SPINDLE_DEFAULT_SPIN_NS;
            else if (now > deadline)
                break;
            if (pool && pool_all_awake(pool)) {
                spindle_seam_count_spin_cut();
                break;
            }
        }
        spindle_cpu_relax();
    }
    uint32_t expected = SPINDLE_LATCH_UNSET;
    /* See L1; acq_rel/acquire as in spindle_worker_wait_latch. */
    if (!atomic_compare_exchange_strong_explicit(latch, &expected, SPINDLE_LATCH_SLEEPING,
                                                 memory_order_acq_rel, memory_order_acquire) &&
        expected == SPINDLE_LATCH_SET)
        return;
    while (atomic_load_explicit(latch, memory_order_acquire) != SPINDLE_LATCH_SET)
        spindle_futex_wait(latch, SPINDLE_LATCH_SLEEPING);
}

static void frame_run(spindle_task *task, spindle_run_reason reason) {
    (void)reason; /* frames always run: their forker is waiting for the result */
    spindle_join_frame *f = (spindle_join_frame *)(void *)task;
    spindle_worker *waiter = f->spindle_waiter; /* before the latch is set (L2) */
    f->fn(f->ctx);
    latch_set(frame_latch(f), waiter);
}

/* A fork from a thread that is not one of `pool`'s workers: the frame goes on the
 * injector. Out of line, to keep the submission off the path of a worker's fork, the
 * usual one. */
__attribute__((noinline)) static void fork_elsewhere(spindle_pool *pool, spindle_join_frame *f) {
    f->spindle_waiter = NULL;
    /* A pool that is shutting down refuses outside work: the caller runs both halves. */
    f->spindle_flags = spindle_submit_task(pool, &f->task) == 0 ? FRAME_REMOTE : FRAME_INLINE;
}

/* Publishes a frame whose `fn`/`ctx` are set: on the calling worker's deque, on the
 * injector from outside the pool, or nowhere (FRAME_INLINE). `run` is how a thief calls
 * the offered half. */
static inline void fork_frame(spindle_pool *pool, spindle_join_frame *f, spindle_task_fn run) {
    f->task.run = run;
    atomic_init(frame_latch(f), SPINDLE_LATCH_UNSET);
    spindle_worker *w = spindle_tls_worker;
    if (__builtin_expect(!w || w->pool != pool, 0)) {
        fork_elsewhere(pool, f);
        return;
    }
    /* W4 (worker.c): past the floor, no fork; the caller runs both halves. */
    if (spindle_worker_past_floor(w)) {
        f->spindle_waiter = NULL;
        f->spindle_flags = FRAME_INLINE;
        return;
    }
    f->spindle_waiter = w;
    f->spindle_flags = FRAME_LOCAL;
    spindle_worker_push(w, &f->task);
}

void spindle_fork(spindle_pool *pool, spindle_join_frame *f) { fork_frame(pool, f, frame_run); }

/* The rest of a local join whose first pop did not return the frame: `t` is what that
 * pop returned. Out of line, so that the usual join (the pop finds the frame) saves no
 * registers for this loop. */
__attribute__((noinline)) static bool join_local_slow(spindle_worker *w, spindle_join_frame *f,
                                                      spindle_task *t) {
    for (; t; t = spindle_deque_pop(&w->deque)) {
        if (t == &f->task) return true;
        spindle_run_task(w, t);
    }
    spindle_worker_wait_latch(w, frame_latch(f));
    return false;
}

/* A join of a frame that was not pushed on a worker's deque: one the caller runs
 * inline (FRAME_INLINE), or one on the injector (FRAME_REMOTE). */
__attribute__((noinline)) static bool join_elsewhere(spindle_pool *pool, spindle_join_frame *f) {
    if (f->spindle_flags == FRAME_INLINE) return true;
    latch_wait_external(frame_latch(f), pool);
    return false;
}

static inline bool join_frame(spindle_pool *pool, spindle_join_frame *f) {
    if (__builtin_expect(f->spindle_flags != FRAME_LOCAL, 0)) return join_elsewhere(pool, f);
    spindle_worker *w = f->spindle_waiter;
    spindle_task *t = spindle_deque_pop(&w->deque);
    if (__builtin_expect(t == &f->task, 1)) return true;
    return join_local_slow(w, f, t);
}

bool spindle_join(spindle_pool *pool, spindle_join_frame *f) {
    return join_frame(pool, f);
}

#ifdef SPINDLE_HAS_SWIFTCALL
typedef void (*swift_closure_fn)(void *__attribute__((swift_context)) ctx) __attribute__((swiftcall));

/* The offered half of a Swift fork, run by a thief: the frame's `fn` holds the
 * closure's entry point (a swiftcall function, stored through a plain function pointer
 * type and cast back here) and `ctx` its context. */
static void frame_run_swift(spindle_task *task, spindle_run_reason reason) {
    (void)reason; /* as frame_run */
    spindle_join_frame *f = (spindle_join_frame *)(void *)task;
    spindle_worker *waiter = f->spindle_waiter; /* before the latch is set (L2) */
    ((swift_closure_fn)(void (*)(void))f->fn)(f->ctx);
    latch_set(frame_latch(f), waiter);
}

__attribute__((swiftcall)) void spindle_swift_fork(spindle_pool *pool, spindle_join_frame *f,
                                                   swift_closure_fn offered_fn, void *offered_ctx) {
    f->fn = (void (*)(void *))(void (*)(void))offered_fn;
    f->ctx = offered_ctx;
    fork_frame(pool, f, frame_run_swift);
}

__attribute__((swiftcall)) bool spindle_swift_join(spindle_pool *pool, spindle_join_frame *f,
                                                   swift_closure_fn offered_fn, void *offered_ctx) {
    /* The same closure, at the same address, as at the fork (spindle.h): anything else
     * means a thief may have called a context that no longer exists. */
    if (__builtin_expect(f->ctx != offered_ctx ||
                             f->fn != (void (*)(void *))(void (*)(void))offered_fn,
                         0)) {
        spindle_log(SPINDLE_LOG_ERROR,
                    "spindle_swift_join: the offered closure is not the one spindle_swift_fork published");
        abort();
    }
    /* True: the caller runs the closure itself, where the compiler can inline it. */
    return join_frame(pool, f);
}
#endif

/* ---- parallel for --------------------------------------------------------------------- */

typedef struct pf_job {
    _Atomic size_t next;      /* next index to hand out                       */
    _Atomic size_t done;      /* iterations completed                         */
    _Atomic uint32_t refs;    /* the caller + every helper not yet finished   */
    _Atomic uint32_t latch;   /* set when done == n                           */
    spindle_worker *waiter;   /* the caller, when it is a worker (L2)         */
    size_t n, grain;
    void (*body)(void *, size_t, size_t);
    void *ctx;
    uint32_t nhelpers;
    spindle_task helpers[];
} pf_job;

static void pf_release(pf_job *j) {
    /* acq_rel: the last owner must see every other owner's accesses before freeing. */
    if (atomic_fetch_sub_explicit(&j->refs, 1, memory_order_acq_rel) == 1) free(j);
}

static void pf_work(pf_job *j) {
    for (;;) {
        /* Relaxed claims: the counter only partitions the index space; the data the
         * body needs was published by the task's enqueue (or is the caller's own). The
         * load first keeps `next` from creeping past n by a grain per late helper. */
        if (atomic_load_explicit(&j->next, memory_order_relaxed) >= j->n) return;
        size_t b = atomic_fetch_add_explicit(&j->next, j->grain, memory_order_relaxed);
        if (b >= j->n) return;
        size_t e = b + j->grain < j->n ? b + j->grain : j->n;
        j->body(j->ctx, b, e);
        /* acq_rel: release publishes this range's effects; acquire (for the one that
         * completes the count) gathers everyone's before it sets the latch. */
        size_t prev = atomic_fetch_add_explicit(&j->done, e - b, memory_order_acq_rel);
        if (prev + (e - b) == j->n) latch_set(&j->latch, j->waiter);
    }
}

static void pf_helper_run(spindle_task *t, spindle_run_reason reason) {
    pf_job *j = t->spindle_private[1];
    /* A cancelled helper does no work; the caller takes the ranges it would have. */
    if (reason == SPINDLE_RUN) pf_work(j);
    pf_release(j);
}

int spindle_parallel_for(spindle_pool *pool, size_t n, size_t grain,
                         void (*body)(void *ctx, size_t begin, size_t end), void *ctx) {
    if (n == 0) return 0;
    uint32_t workers = pool->nworkers;
    if (grain == 0) {
        /* About eight ranges per worker: enough slack for stealing to even out uneven
         * iterations, few enough that the shared counter is not a hot spot. */
        grain = n / ((size_t)workers * 8);
        if (grain == 0) grain = 1;
    }
    spindle_worker *w = spindle_tls_worker;
    if (w && w->pool != pool) w = NULL;
    size_t ranges = (n + grain - 1) / grain;
    uint32_t helpers = w ? workers - 1 : workers;
    if (ranges - 1 < helpers) helpers = (uint32_t)(ranges - 1);
    /* W4 (worker.c): past the floor, no helpers, so no wait either. */
    if (w && spindle_worker_past_floor(w)) helpers = 0;
    if (helpers == 0) {
        body(ctx, 0, n);
        return 0;
    }
    pf_job *j = malloc(sizeof *j + helpers * sizeof(spindle_task));
    if (!j) return ENOMEM;
    atomic_init(&j->next, 0);
    atomic_init(&j->done, 0);
    atomic_init(&j->refs, helpers + 1);
    atomic_init(&j->latch, SPINDLE_LATCH_UNSET);
    j->waiter = w;
    j->n = n;
    j->grain = grain;
    j->body = body;
    j->ctx = ctx;
    j->nhelpers = helpers;
    for (uint32_t i = 0; i < helpers; i++) {
        j->helpers[i].run = pf_helper_run;
        j->helpers[i].spindle_private[1] = j;
    }
    if (w) {
        for (uint32_t i = 0; i < helpers; i++) spindle_worker_push(w, &j->helpers[i]);
    } else {
        for (uint32_t i = 0; i < helpers; i++) {
            if (spindle_submit_task(pool, &j->helpers[i]) != 0) {
                /* Shutting down: the caller does those ranges itself. Relaxed: nobody
                 * else can reach the references we drop here. */
                atomic_fetch_sub_explicit(&j->refs, helpers - i, memory_order_relaxed);
                break;
            }
        }
    }
    pf_work(j);
    if (w) {
        /* Take back the helpers nobody started (they sit on top of our deque) until the
         * last range completes; helpers left behind then just drop their reference. */
        while (atomic_load_explicit(&j->latch, memory_order_acquire) != SPINDLE_LATCH_SET) {
            spindle_task *t = spindle_deque_pop(&w->deque);
            if (!t) break;
            if (t >= j->helpers && t < j->helpers + helpers)
                pf_release(j);
            else
                spindle_run_task(w, t);
        }
        spindle_worker_wait_latch(w, &j->latch);
    } else {
        latch_wait_external(&j->latch, pool);
    }
    pf_release(j);
    return 0;
}

/* ---- stand-alone latches (spindle.h) ------------------------------------------------ */

static inline _Atomic uint32_t *latch_word(spindle_latch *l) {
    return (_Atomic uint32_t *)(void *)&l->spindle_state;
}

void spindle_latch_init(spindle_latch *l) {
    atomic_init(latch_word(l), SPINDLE_LATCH_UNSET);
    /* The waiter is recorded now, on the waiting thread, before the latch is published
     * to any setter (L2). */
    l->spindle_waiter = spindle_tls_worker;
}

void spindle_latch_set(spindle_latch *l) {
    spindle_worker *waiter = l->spindle_waiter; /* before the exchange (L2) */
    latch_set(latch_word(l), waiter);
}

void spindle_worker_block_on_latch(spindle_worker *w, _Atomic uint32_t *latch) {
    if (atomic_load_explicit(latch, memory_order_acquire) == SPINDLE_LATCH_SET) return;
    spindle_blocking_begin();
    uint32_t expected = SPINDLE_LATCH_UNSET;
    /* See L1; acq_rel/acquire as in spindle_worker_wait_latch. The setter wakes a
     * worker through its parker (L2), so that is what it sleeps on. */
    if (atomic_compare_exchange_strong_explicit(latch, &expected, SPINDLE_LATCH_SLEEPING,
                                                memory_order_acq_rel, memory_order_acquire) ||
        expected != SPINDLE_LATCH_SET) {
        while (atomic_load_explicit(latch, memory_order_acquire) != SPINDLE_LATCH_SET)
            spindle_parker_park(&w->parker);
    }
    spindle_blocking_end();
}

void spindle_latch_wait_blocking(spindle_latch *l) {
    /* On any thread: block (a worker of another pool is compensated too:
     * latch_wait_external). */
    spindle_worker *w = l->spindle_waiter;
    if (w && w == spindle_tls_worker)
        spindle_worker_block_on_latch(w, latch_word(l));
    else
        latch_wait_external(latch_word(l), NULL);
}

void spindle_latch_wait(spindle_latch *l) {
    spindle_worker *w = l->spindle_waiter;
    if (w && w == spindle_tls_worker)
        spindle_worker_wait_latch(w, latch_word(l));
    else
        latch_wait_external(latch_word(l), NULL);
}
