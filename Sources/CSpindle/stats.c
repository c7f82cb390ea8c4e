/*
 * stats.c — counter snapshots and CPU accounting.
 *
 * Counters are written by their worker with relaxed load+store (single writer) or, for
 * `stolen_from`, with relaxed fetch_add by thieves; they are read here with relaxed
 * loads. A snapshot is therefore a set of individually exact values taken at slightly
 * different instants, which is what monitoring needs; nothing synchronises on them.
 */
#include "internal.h"

#include <time.h>

static uint64_t thread_cpu_ns(pthread_t thread) {
    clockid_t clock;
    struct timespec ts;
    if (pthread_getcpuclockid(thread, &clock) != 0) return 0;
    if (clock_gettime(clock, &ts) != 0) return 0;
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint32_t spindle_pool_stats(const spindle_pool *pool, spindle_worker_stats *out, uint32_t count) {
    uint32_t n = count < pool->nworkers ? count : pool->nworkers;
    for (uint32_t i = 0; i < n; i++) {
        spindle_counters *c = &pool->workers[i]->counters;
        out[i].executed = atomic_load_explicit(&c->executed, memory_order_relaxed);
        out[i].stolen = atomic_load_explicit(&c->stolen, memory_order_relaxed);
        out[i].stolen_from = atomic_load_explicit(&c->stolen_from, memory_order_relaxed);
        out[i].parked = atomic_load_explicit(&c->parked, memory_order_relaxed);
        out[i].injector_pops = atomic_load_explicit(&c->injector_pops, memory_order_relaxed);
        out[i].overflowed = atomic_load_explicit(&c->overflowed, memory_order_relaxed);
        out[i].cpu_ns = thread_cpu_ns(pool->workers[i]->thread);
    }
    return n;
}

uint64_t spindle_pool_cpu_time_ns(const spindle_pool *pool) {
    uint64_t sum = 0;
    for (uint32_t i = 0; i < pool->nworkers; i++) sum += thread_cpu_ns(pool->workers[i]->thread);
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
    /* Plain field: written once at creation, before the pool is handed out. */
    return pool->requested_slice_ns;
}
