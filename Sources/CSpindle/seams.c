/*
 * seams.c — the engine's test seams: knobs that tests set (through CSpindleTesting's
 * testing.c) and the engine reads at a few rare points (a worker's start, a join
 * setter's wake, a pool's thread starts). Compiled only where SPINDLE_TESTING is
 * defined, which Package.swift does for debug builds; in a release build each seam is
 * a constant (internal.h), so no production path reads test state.
 */
#include "internal.h"

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

#else

/* ISO C wants a translation unit to declare something. */
typedef int spindle_no_test_seams;

#endif
