/*
 * offload.c — the bare offload: the plainest way to run Swift tasks' work on a second
 * set of threads, with nothing of a pool around it.
 *
 * Why it is in the benchmark: `async-offload` compares Spindle's `pool.run` with
 * `Task.detached`, which never leaves the cooperative threads. An offload to threads
 * of its own hands the task's work to one of them and its resumption back: two
 * hand-offs between thread sets that share the same CPUs. Measuring those hand-offs
 * with nothing else, in the same run, shows what such an offload pays by itself, and
 * so how much of Spindle's cost is its own.
 *
 * What it does: one thread per CPU of the creator's affinity mask (not pinned), each
 * with a bounded ring that any thread may add to and only its own thread takes from
 * (Vyukov's bounded queue, 1024 slots), filled in turn by the submissions. A thread
 * with an empty ring looks at it again for 50 us, giving the CPU away between looks
 * (a spin that keeps it starves the submitting threads, which share the CPUs, and
 * measured several times slower), then parks on a futex word that a submission clears
 * and wakes. No task node, no stealing, no classes, no accounting, no cancellation:
 * the caller resumes its task's continuation from `fn`.
 *
 * Dmitry Vyukov, "Bounded MPMC queue" (1024cores.net): each slot carries a sequence
 * number that says whether it is free for the producer of a given position or full for
 * its consumer; here the single consumer needs no compare-and-swap.
 */
#include "bench_support.h"

#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

enum { SLOTS = 1024, SPIN_NS = 50000 };

typedef struct {
    /* A position while the slot is free for that position's producer; position + 1
     * once it holds that position's task; position + SLOTS once the consumer has
     * taken it, which frees it for the next lap. */
    _Atomic size_t seq;
    void (*fn)(void *, intptr_t);
    void *ctx;
    intptr_t arg;
} slot;

typedef struct {
    _Alignas(64) _Atomic size_t tail; /* the next position to add at */
    _Alignas(64) size_t head;         /* the consumer's next position: its thread's alone */
    /* 1 while the thread is parked or about to park; the futex word. */
    _Alignas(64) _Atomic uint32_t sleeping;
    _Atomic int stop;
    pthread_t thread;
    slot slots[SLOTS];
} ring;

struct bench_offload {
    _Atomic size_t next; /* round robin over the rings */
    int n;
    ring *rings;
};

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Takes the next task, if it is there. Only the ring's own thread calls this. */
static int take(ring *r, void (**fn)(void *, intptr_t), void **ctx, intptr_t *arg) {
    slot *s = &r->slots[r->head % SLOTS];
    /* Acquire pairs with the producer's release store of head + 1: the task's fields
     * are visible. */
    if (atomic_load_explicit(&s->seq, memory_order_acquire) != r->head + 1) return 0;
    *fn = s->fn;
    *ctx = s->ctx;
    *arg = s->arg;
    /* Release pairs with a producer's acquire load of the slot's sequence a lap later:
     * these reads happen before its writes. */
    atomic_store_explicit(&s->seq, r->head + SLOTS, memory_order_release);
    r->head++;
    return 1;
}

static void *ring_main(void *arg) {
    ring *r = arg;
    for (;;) {
        void (*fn)(void *, intptr_t);
        void *ctx;
        intptr_t a;
        if (take(r, &fn, &ctx, &a)) {
            fn(ctx, a);
            continue;
        }
        uint64_t until = now_ns() + SPIN_NS;
        int found = 0;
        while (!found && now_ns() < until) {
            /* The CPU goes to the submitting threads between rounds: they share it. */
            sched_yield();
            for (int i = 0; i < 16 && !found; i++) {
                __builtin_ia32_pause();
                slot *s = &r->slots[r->head % SLOTS];
                /* Relaxed: a hint; `take` reads it again with acquire. */
                found = atomic_load_explicit(&s->seq, memory_order_relaxed) == r->head + 1;
            }
        }
        if (found) continue;
        /* Stop is read after a drain: the benchmark stops an idle set. Acquire pairs
         * with destroy's release store. */
        if (atomic_load_explicit(&r->stop, memory_order_acquire)) return NULL;
        /* Dekker with submit: seq_cst store of `sleeping`, then the ring is read again;
         * submit publishes, then reads `sleeping` with seq_cst. One of the two sees
         * the other, so a task is never left in a ring whose thread sleeps. */
        atomic_store_explicit(&r->sleeping, 1, memory_order_seq_cst);
        slot *s = &r->slots[r->head % SLOTS];
        if (atomic_load_explicit(&s->seq, memory_order_seq_cst) == r->head + 1 ||
            atomic_load_explicit(&r->stop, memory_order_seq_cst)) {
            atomic_store_explicit(&r->sleeping, 0, memory_order_relaxed);
            continue;
        }
        while (atomic_load_explicit(&r->sleeping, memory_order_acquire) == 1)
            syscall(SYS_futex, &r->sleeping, FUTEX_WAIT_PRIVATE, 1, NULL, NULL, 0);
    }
}

bench_offload *bench_offload_create(void) {
    cpu_set_t mask;
    if (sched_getaffinity(0, sizeof mask, &mask) != 0) return NULL;
    struct bench_offload *h = calloc(1, sizeof *h);
    if (!h) return NULL;
    h->n = CPU_COUNT(&mask);
    if (posix_memalign((void **)&h->rings, 64, sizeof(ring) * (size_t)h->n) != 0) {
        free(h);
        errno = ENOMEM;
        return NULL;
    }
    memset(h->rings, 0, sizeof(ring) * (size_t)h->n);
    for (int i = 0; i < h->n; i++) {
        ring *r = &h->rings[i];
        for (size_t p = 0; p < SLOTS; p++) atomic_init(&r->slots[p].seq, p);
    }
    for (int i = 0; i < h->n; i++) {
        int rc = pthread_create(&h->rings[i].thread, NULL, ring_main, &h->rings[i]);
        if (rc != 0) {
            h->n = i;
            bench_offload_destroy(h);
            errno = rc;
            return NULL;
        }
    }
    return h;
}

void bench_offload_submit(bench_offload *h, void (*fn)(void *, intptr_t), void *ctx, intptr_t arg) {
    /* Relaxed: only spreads the submissions. */
    size_t k = atomic_fetch_add_explicit(&h->next, 1, memory_order_relaxed);
    ring *r = &h->rings[k % (size_t)h->n];
    size_t pos = atomic_load_explicit(&r->tail, memory_order_relaxed);
    slot *s;
    for (;;) {
        s = &r->slots[pos % SLOTS];
        /* Acquire pairs with the consumer's release store of pos + SLOTS (see take). */
        size_t seq = atomic_load_explicit(&s->seq, memory_order_acquire);
        if (seq == pos) {
            /* Relaxed: the position is claimed; the slot is published below. */
            if (atomic_compare_exchange_weak_explicit(&r->tail, &pos, pos + 1, memory_order_relaxed,
                                                      memory_order_relaxed))
                break;
        } else if (seq < pos) {
            /* Full: the benchmark keeps at most its tasks' count in flight. */
            sched_yield();
            pos = atomic_load_explicit(&r->tail, memory_order_relaxed);
        } else {
            pos = atomic_load_explicit(&r->tail, memory_order_relaxed);
        }
    }
    s->fn = fn;
    s->ctx = ctx;
    s->arg = arg;
    /* seq_cst: releases the task to `take`, and is the publishing half of the Dekker
     * pair with the thread's store of `sleeping` (see ring_main). */
    atomic_store_explicit(&s->seq, pos + 1, memory_order_seq_cst);
    if (atomic_load_explicit(&r->sleeping, memory_order_seq_cst) &&
        atomic_exchange_explicit(&r->sleeping, 0, memory_order_relaxed))
        syscall(SYS_futex, &r->sleeping, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

void bench_offload_destroy(bench_offload *h) {
    for (int i = 0; i < h->n; i++) {
        ring *r = &h->rings[i];
        /* seq_cst, then the exchange: the other half of ring_main's Dekker pair, so
         * the thread either reads `stop` before it sleeps or is seen asleep and woken. */
        atomic_store_explicit(&r->stop, 1, memory_order_seq_cst);
        if (atomic_exchange_explicit(&r->sleeping, 0, memory_order_seq_cst))
            syscall(SYS_futex, &r->sleeping, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
        pthread_join(r->thread, NULL);
    }
    free(h->rings);
    free(h);
}
