/*
 * handoff.c — the floor for start latency: the least a pool whose idle threads park
 * must pay to start one task on a parked thread.
 *
 * Why it is in the benchmark: `qos-under-load` asks Spindle's interactive p99 to be at
 * most 0.2x Dispatch's. Spindle parks idle workers (it must not burn idle CPU), so a
 * task submitted to an idle pool costs at least a futex wake-up and a context switch.
 * Measuring that hand-off alone, under the same background load, in the same run,
 * shows how far Spindle is from what parking allows, and what the target asks of it.
 *
 * What it does, mirroring the best case of Spindle's userInteractive worker set (one
 * worker pinned per CPU, nice -4, a 100 us slice, the worker on the submitter's own
 * CPU woken — park.c, "Which sleeper to wake"): one thread per CPU of the creator's
 * affinity mask, pinned there, at the given nice and slice, each parked on its
 * mailbox word with FUTEX_WAIT. A submission stores the task in the mailbox of the
 * thread on the submitter's CPU and wakes it with FUTEX_WAKE. Nothing else: no queue,
 * no search before parking, no accounting.
 */
#include "bench_support.h"

#include <spindle.h>

#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

enum { EMPTY = 0, FULL = 1, STOP = 2 };

typedef struct {
    /* EMPTY, FULL or STOP; the futex word the thread parks on. */
    _Atomic uint32_t word;
    void (*fn)(void *);
    void *ctx;
    int cpu;
    pthread_t thread;
    struct bench_handoff *owner;
} __attribute__((aligned(64))) mailbox;

struct bench_handoff {
    int nice;
    uint32_t slice_ns;
    /* First refusal of each, written by the threads before `ready` counts them. */
    _Atomic int nice_error, slice_error;
    /* Threads that applied their settings; create waits for all of them. */
    _Atomic int ready;
    int n;
    mailbox *boxes;
};

static void futex_wait(_Atomic uint32_t *word, uint32_t expected) {
    syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *word) {
    syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static void first_error(_Atomic int *slot, int err) {
    int expected = 0;
    /* Relaxed: a report, ordered for create by the release increment of `ready`. */
    atomic_compare_exchange_strong_explicit(slot, &expected, err, memory_order_relaxed,
                                            memory_order_relaxed);
}

static void *waiter_main(void *arg) {
    mailbox *m = arg;
    struct bench_handoff *h = m->owner;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(m->cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    pid_t tid = (pid_t)syscall(SYS_gettid);
    if (setpriority(PRIO_PROCESS, (id_t)tid, h->nice) != 0) first_error(&h->nice_error, errno);
    /* The very call Spindle's workers make. */
    if (h->slice_ns) {
        int err = spindle_thread_request_slice(h->slice_ns);
        if (err) first_error(&h->slice_error, err);
    }
    /* Release pairs with create's acquire load: the error reports above are visible. */
    atomic_fetch_add_explicit(&h->ready, 1, memory_order_release);
    for (;;) {
        /* Acquire pairs with submit's release store of FULL: fn and ctx are visible. */
        uint32_t v = atomic_load_explicit(&m->word, memory_order_acquire);
        if (v == STOP) return NULL;
        if (v == EMPTY) {
            futex_wait(&m->word, EMPTY);
            continue;
        }
        void (*fn)(void *) = m->fn;
        void *ctx = m->ctx;
        /* Release pairs with submit's acquire load of EMPTY: our reads of fn and ctx
         * happen before the next submission overwrites them. */
        atomic_store_explicit(&m->word, EMPTY, memory_order_release);
        fn(ctx);
    }
}

bench_handoff *bench_handoff_create(int nice, uint32_t slice_ns, int *nice_error, int *slice_error) {
    cpu_set_t mask;
    if (sched_getaffinity(0, sizeof mask, &mask) != 0) return NULL;
    struct bench_handoff *h = calloc(1, sizeof *h);
    if (!h) return NULL;
    h->nice = nice;
    h->slice_ns = slice_ns;
    atomic_init(&h->nice_error, 0);
    atomic_init(&h->slice_error, 0);
    atomic_init(&h->ready, 0);
    h->n = CPU_COUNT(&mask);
    if (posix_memalign((void **)&h->boxes, 64, sizeof(mailbox) * (size_t)h->n) != 0) {
        free(h);
        errno = ENOMEM;
        return NULL;
    }
    int k = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE && k < h->n; cpu++) {
        if (!CPU_ISSET(cpu, &mask)) continue;
        mailbox *m = &h->boxes[k++];
        memset(m, 0, sizeof *m);
        atomic_init(&m->word, EMPTY);
        m->cpu = cpu;
        m->owner = h;
    }
    for (int i = 0; i < h->n; i++) {
        int rc = pthread_create(&h->boxes[i].thread, NULL, waiter_main, &h->boxes[i]);
        if (rc != 0) {
            /* Stop the ones already running, then report. */
            h->n = i;
            bench_handoff_destroy(h);
            errno = rc;
            return NULL;
        }
    }
    /* Acquire pairs with each thread's release increment. */
    while (atomic_load_explicit(&h->ready, memory_order_acquire) < h->n) usleep(100);
    if (nice_error) *nice_error = atomic_load_explicit(&h->nice_error, memory_order_relaxed);
    if (slice_error) *slice_error = atomic_load_explicit(&h->slice_error, memory_order_relaxed);
    return h;
}

void bench_handoff_submit(bench_handoff *h, void (*fn)(void *), void *ctx) {
    int cpu = sched_getcpu();
    mailbox *m = &h->boxes[0];
    for (int i = 0; i < h->n; i++)
        if (h->boxes[i].cpu == cpu) m = &h->boxes[i];
    /* Acquire pairs with the thread's release store of EMPTY (see waiter_main). */
    while (atomic_load_explicit(&m->word, memory_order_acquire) != EMPTY) sched_yield();
    m->fn = fn;
    m->ctx = ctx;
    /* Release pairs with the thread's acquire load: it sees fn and ctx. A single
     * submitter per mailbox is assumed (the benchmark's), so a plain store will do. */
    atomic_store_explicit(&m->word, FULL, memory_order_release);
    futex_wake(&m->word);
}

void bench_handoff_destroy(bench_handoff *h) {
    for (int i = 0; i < h->n; i++) {
        mailbox *m = &h->boxes[i];
        /* Wait for a task still in the mailbox to be taken; then stop. Acquire, as in
         * submit; release so the thread's acquire load sees STOP after it. */
        while (atomic_load_explicit(&m->word, memory_order_acquire) == FULL) sched_yield();
        atomic_store_explicit(&m->word, STOP, memory_order_release);
        futex_wake(&m->word);
        pthread_join(m->thread, NULL);
    }
    free(h->boxes);
    free(h);
}
