/*
 * stats.c — counter snapshots and CPU accounting.
 *
 * Counters are written by their worker with relaxed load+store (single writer) or, for
 * `stolen_from`, with relaxed fetch_add by thieves; they are read here with relaxed
 * loads. A snapshot is therefore a set of individually exact values taken at slightly
 * different instants, which is what monitoring needs; nothing synchronises on them.
 *
 * Also here, the façade's two per-thread words (spindle_sync.h): the count behind
 * spindle_sample_due, with which it samples submissions for its timers, and the slot of
 * its per-thread state (spindle_facade_state).
 */
#include "internal.h"

#include <time.h>

_Thread_local uint32_t spindle_tls_sample_count SPINDLE_TLS_INITIAL_EXEC;
_Thread_local void *spindle_tls_facade_state SPINDLE_TLS_INITIAL_EXEC;

static uint64_t thread_cpu_ns(pthread_t thread) {
    clockid_t clock;
    struct timespec ts;
    if (pthread_getcpuclockid(thread, &clock) != 0) return 0;
    if (clock_gettime(clock, &ts) != 0) return 0;
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A spare's CPU time, through its thread's kernel id (spare.c): it is detached, and its
 * pthread_t is gone once it exits. 0 when no thread runs the slot. */
static uint64_t spare_cpu_ns(const spindle_worker *w) {
    int32_t tid = atomic_load_explicit(&((spindle_worker *)w)->tid, memory_order_relaxed);
    if (tid == 0) return 0;
    clockid_t id = (clockid_t)((~(unsigned)tid << 3) | 6u); /* as spare.c's thread_cpu_ns */
    struct timespec ts;
    if (clock_gettime(id, &ts) != 0) return 0;
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint32_t spindle_pool_slot_count(const spindle_pool *pool) {
    /* Acquire pairs with the release that published each spare slot. */
    return atomic_load_explicit(&((spindle_pool *)pool)->nslots, memory_order_acquire);
}

uint32_t spindle_pool_stats(const spindle_pool *pool, spindle_worker_stats *out, uint32_t count) {
    uint32_t slots = spindle_pool_slot_count(pool);
    uint32_t n = count < slots ? count : slots;
    for (uint32_t i = 0; i < n; i++) {
        const spindle_worker *w = pool->workers[i];
        spindle_counters *c = &pool->workers[i]->counters;
        out[i].executed = atomic_load_explicit(&c->executed, memory_order_relaxed);
        out[i].stolen = atomic_load_explicit(&c->stolen, memory_order_relaxed);
        out[i].stolen_from = atomic_load_explicit(&c->stolen_from, memory_order_relaxed);
        out[i].parked = atomic_load_explicit(&c->parked, memory_order_relaxed);
        out[i].injector_pops = atomic_load_explicit(&c->injector_pops, memory_order_relaxed);
        out[i].overflowed = atomic_load_explicit(&c->overflowed, memory_order_relaxed);
        out[i].cpu_ns = w->spare ? spare_cpu_ns(w) : thread_cpu_ns(w->thread);
        out[i].spare = w->spare;
    }
    return n;
}

uint64_t spindle_pool_cpu_time_ns(const spindle_pool *pool) {
    uint64_t sum = 0;
    uint32_t slots = spindle_pool_slot_count(pool);
    for (uint32_t i = 0; i < slots; i++) {
        const spindle_worker *w = pool->workers[i];
        sum += w->spare ? spare_cpu_ns(w) : thread_cpu_ns(w->thread);
    }
    return sum;
}

int32_t spindle_pool_effective_nice(const spindle_pool *pool) {
    return atomic_load_explicit(&((spindle_pool *)pool)->effective_nice, memory_order_relaxed);
}

int spindle_pool_nice_error(const spindle_pool *pool) {
    return atomic_load_explicit(&((spindle_pool *)pool)->nice_error, memory_order_relaxed);
}

int spindle_pool_effective_policy(const spindle_pool *pool) {
    return atomic_load_explicit(&((spindle_pool *)pool)->effective_policy, memory_order_relaxed);
}

int spindle_pool_policy_error(const spindle_pool *pool) {
    return atomic_load_explicit(&((spindle_pool *)pool)->policy_error, memory_order_relaxed);
}

int spindle_pool_slice_error(const spindle_pool *pool) {
    return atomic_load_explicit(&((spindle_pool *)pool)->slice_error, memory_order_relaxed);
}

uint32_t spindle_pool_requested_slice_ns(const spindle_pool *pool) {
    /* Plain field: written once at creation, before the pool is handed out. Relaxed:
     * the flag is a report, ordered for its reader by create's wait for the workers. */
    if (atomic_load_explicit(&((spindle_pool *)pool)->slice_not_asked, memory_order_relaxed)) return 0;
    return pool->requested_slice_ns;
}

uint64_t spindle_pool_queued(const spindle_pool *pool) {
    spindle_pool *p = (spindle_pool *)pool;
    /* Relaxed, all: a gauge for an operator, read while the queues move. */
    int64_t n = atomic_load_explicit(&p->injector.len, memory_order_relaxed);
    uint32_t slots = spindle_pool_slot_count(pool);
    for (uint32_t i = 0; i < slots; i++) n += spindle_deque_len(&p->workers[i]->deque);
    return n > 0 ? (uint64_t)n : 0;
}

uint32_t spindle_pool_parked(const spindle_pool *pool) {
    spindle_pool *p = (spindle_pool *)pool;
    pthread_mutex_lock(&p->idle.lock);
    uint32_t n = p->idle.nsleepers;
    pthread_mutex_unlock(&p->idle.lock);
    return n;
}
