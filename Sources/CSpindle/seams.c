/*
 * seams.c — the engine's test seams: knobs that tests set (through CSpindleTesting's
 * testing.c) and the engine reads at a few points (a worker's start, a join setter's
 * wake, a pool's thread starts, a task's run). Compiled only where SPINDLE_TESTING is
 * defined, which Package.swift does for debug builds; in a release build each seam is
 * a constant (internal.h), so no production path reads test state.
 */
#include "internal.h"

#include <limits.h>

#ifdef SPINDLE_TESTING

_Atomic size_t spindle_test_join_floor;
_Atomic size_t spindle_test_deepest_join;
_Atomic uint64_t spindle_test_latch_wake_delay;

void spindle_test_record_join_wait(size_t used) {
    /* Relaxed: a statistic that only tests read, after joins whose latches ordered the
     * waits' writes before their return; a CAS loop keeps the maximum. */
    size_t seen = atomic_load_explicit(&spindle_test_deepest_join, memory_order_relaxed);
    while (used > seen && !atomic_compare_exchange_weak_explicit(&spindle_test_deepest_join, &seen, used,
                                                                 memory_order_relaxed, memory_order_relaxed)) {
    }
}

/* A test's limit on the workers one pool creation may start (spindle_test_limit_threads):
 * -1, none; otherwise starting more fails with EAGAIN, as under a thread limit
 * (RLIMIT_NPROC, a container's pids.max). */
static _Atomic int32_t thread_limit = -1;

bool spindle_test_thread_allowed(uint32_t started) {
    /* Relaxed: a test knob, set before the pools it concerns are made. */
    int32_t limit = atomic_load_explicit(&thread_limit, memory_order_relaxed);
    return limit < 0 || started < (uint32_t)limit;
}

void spindle_test_limit_threads(int32_t limit) {
    atomic_store_explicit(&thread_limit, limit, memory_order_relaxed);
}

/* The kinds of thread whose creation fails with EAGAIN, as under a thread limit: a
 * spare (spawn.c, start_spare), the spawner, and the threads the spawner starts for
 * the engine's own use (the monitor) (spawn.c, spindle_start_service_thread). */
_Atomic uint32_t spindle_test_refused_threads;
_Atomic uint32_t spindle_test_refusals;
_Atomic uint32_t spindle_test_refusal_gate;

/* Waits until the test opens `gate` (stores 0). Acquire pairs with the test's release
 * store that opens it. */
static void wait_until_open(_Atomic uint32_t *gate) {
    while (atomic_load_explicit(gate, memory_order_acquire) != 0) spindle_futex_wait(gate, 1);
}

void spindle_seam_wait_at_refusal_gate(void) { wait_until_open(&spindle_test_refusal_gate); }

/* How often the monitor has gone to sleep with nothing to watch, and come back (spare.c,
 * MI1): asleep while the first is ahead of the second. */
_Atomic uint32_t spindle_test_monitor_naps;
_Atomic uint32_t spindle_test_monitor_wakes;

/* The monitor's gate between its look that finds nothing to watch and its announcement
 * (spare.c, MI1). */
_Atomic uint32_t spindle_test_monitor_gate;
_Atomic uint32_t spindle_test_monitor_gated;

void spindle_seam_wait_at_monitor_gate(void) {
    /* Release: the test that sees the count knows the monitor has made its first look. */
    atomic_fetch_add_explicit(&spindle_test_monitor_gated, 1, memory_order_release);
    wait_until_open(&spindle_test_monitor_gate);
}

/* A pool's creator's gate between its two registrations (pool.c, spindle_pool_create). */
_Atomic uint32_t spindle_test_registration_gate;
_Atomic(spindle_pool *) spindle_test_registration_gated_pool;

void spindle_seam_wait_at_registration_gate(spindle_pool *pool) {
    /* Release: the test that reads the pool sees it made and in the registry. */
    atomic_store_explicit(&spindle_test_registration_gated_pool, pool, memory_order_release);
    wait_until_open(&spindle_test_registration_gate);
}

/* How often an outside waiter cut its spin short (join.c, L3). */
_Atomic uint32_t spindle_test_spin_cuts;

/* A held pool (spindle_test_hold_pool) stands for a pool whose workers are all busy,
 * without needing them to run: a worker that takes a task waits before running it
 * until the hold is lifted. The tests of promotion use it for the background class,
 * whose SCHED_IDLE workers a busy machine may keep off the CPU for seconds, so that
 * "busy with spinning tasks" could not be arranged in a bounded time. */
void spindle_seam_wait_while_held(spindle_pool *pool) {
    /* Acquire pairs with the release store that lifts the hold: what the test did
     * before lifting it is visible to the task about to run. */
    while (atomic_load_explicit(&pool->test_hold, memory_order_acquire) != 0)
        spindle_futex_wait(&pool->test_hold, 1);
}

void spindle_test_hold_pool(spindle_pool *pool, bool hold) {
    /* Release: see spindle_seam_wait_while_held. Setting the hold needs no order: a
     * worker that reads it late runs the task it had already taken, which the caller
     * must allow for (the pool idle first, or the tasks that matter submitted after). */
    atomic_store_explicit(&pool->test_hold, hold ? 1u : 0u, memory_order_release);
    if (!hold) spindle_futex_wake(&pool->test_hold, INT_MAX);
}

#else

/* ISO C wants a translation unit to declare something. */
typedef int spindle_no_test_seams;

#endif
