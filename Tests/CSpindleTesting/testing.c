/*
 * testing.c — thin wrappers that let tests drive a deque and its overflow injector
 * directly (spindle_testing.h), the setters of the engine's test seams (seams.c), and
 * harnesses for what Swift cannot do safely (fork). They add no logic to the engine.
 *
 * A target of the tests only (CSpindleTesting in Package.swift): no product ships it,
 * and the engine defines its seams only in debug builds (SPINDLE_TESTING).
 */
#include "internal.h"

/* Only debug builds have the seams; a release build of the package (`swift build -c
 * release`) builds this target empty, and the tests, which need it, run in debug. */
#ifdef SPINDLE_TESTING
#include "spindle_testing.h"
#include "topology_internal.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct spindle_test_deque {
    spindle_deque deque;
    spindle_injector overflow;
};

spindle_test_deque *spindle_test_deque_create(uint32_t capacity) {
    spindle_test_deque *d = aligned_alloc(SPINDLE_CACHELINE, (sizeof *d + SPINDLE_CACHELINE - 1) /
                                                               SPINDLE_CACHELINE * SPINDLE_CACHELINE);
    if (!d) return NULL;
    if (spindle_deque_init(&d->deque, capacity, NULL, NULL) != 0) {
        free(d);
        return NULL;
    }
    spindle_injector_init(&d->overflow);
    return d;
}

void spindle_test_deque_destroy(spindle_test_deque *d) {
    spindle_deque_free(&d->deque, NULL, NULL);
    free(d);
}

uint32_t spindle_test_deque_push(spindle_test_deque *d, spindle_task *t) {
    return spindle_deque_push(&d->deque, t, &d->overflow);
}

spindle_task *spindle_test_deque_pop(spindle_test_deque *d) { return spindle_deque_pop(&d->deque); }

int spindle_test_deque_steal(spindle_test_deque *d, spindle_task **out) {
    return (int)spindle_deque_steal(&d->deque, out);
}

uint32_t spindle_test_deque_pop_overflow(spindle_test_deque *d, spindle_task **out, uint32_t max) {
    return spindle_injector_pop_batch(&d->overflow, out, max);
}

uint32_t spindle_test_deque_capacity(const spindle_test_deque *d) {
    return (uint32_t)(d->deque.mask + 1);
}

int spindle_test_pin_self(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return sched_setaffinity(0, sizeof set, &set) == 0 ? 0 : errno;
}

int spindle_test_current_cpu(void) { return sched_getcpu(); }

void spindle_test_relax(void) { spindle_cpu_relax(); }

void spindle_test_add_phantom_searchers(spindle_pool *pool, int32_t delta) {
    /* seq_cst, like every RMW of the idle word. */
    if (delta >= 0)
        atomic_fetch_add_explicit(&pool->idle.state, (uint64_t)delta, memory_order_seq_cst);
    else
        atomic_fetch_sub_explicit(&pool->idle.state, (uint64_t)-delta, memory_order_seq_cst);
}

uint32_t spindle_test_backlog_wake(void) { return SPINDLE_BACKLOG_WAKE; }

void spindle_test_worker_memory(const spindle_pool *pool, uint32_t w, const void **state,
                                size_t *state_bytes, const void **ring, size_t *ring_bytes) {
    const spindle_worker *worker = w < pool->nworkers ? pool->workers[w] : NULL;
    *state = worker;
    *state_bytes = worker ? sizeof *worker : 0;
    *ring = worker ? (const void *)worker->deque.buf : NULL;
    *ring_bytes = worker ? (size_t)(worker->deque.mask + 1) * sizeof worker->deque.buf[0] : 0;
}

static void count_in_child(void *ctx, spindle_run_reason reason) {
    (void)reason;
    /* Relaxed: read after spindle_pool_destroy joined the workers. */
    atomic_fetch_add_explicit((_Atomic int *)ctx, 1, memory_order_relaxed);
}

/* Waits for child `pid` for up to `timeout_ms`; its exit status, 2 on timeout (it is
 * killed), 128 + signal, or -errno. */
static int wait_for_child(pid_t pid, uint32_t timeout_ms) {
    int status = 0;
    for (uint32_t waited = 0;; waited++) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid) break;
        if (r < 0 && errno != EINTR) return -errno;
        if (waited >= timeout_ms) {
            kill(pid, SIGKILL);
            while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
            return 2;
        }
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* The start of every test that runs in a forked child: the parent returns the child's
 * outcome (wait_for_child, within `timeout_ms`), and only the child goes on, to end in
 * _exit with its code. */
#define RUN_IN_FORKED_CHILD(timeout_ms)                                  \
    do {                                                                 \
        pid_t child_ = fork();                                           \
        if (child_ < 0) return -errno;                                   \
        if (child_ != 0) return wait_for_child(child_, (timeout_ms));    \
    } while (0)

/* The child's demoted creator: nice +3, SCHED_BATCH, one CPU; makes the first pool. */
static void *demoted_creator(void *arg) {
    setpriority(PRIO_PROCESS, 0, getpriority(PRIO_PROCESS, 0) + 3);
    struct sched_param none = {0};
    pthread_setschedparam(pthread_self(), SCHED_BATCH, &none);
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(sched_getcpu(), &one);
    sched_setaffinity(0, sizeof one, &one);
    spindle_config cfg;
    spindle_config_init(&cfg);
    cfg.workers = 1;
    cfg.pinning = SPINDLE_PIN_NONE;
    spindle_pool *pool;
    *(spindle_pool **)arg = spindle_pool_create(&cfg, &pool) == 0 ? pool : NULL;
    return NULL;
}

/* Whether a thread of this process may lower its nice again once it has raised it
 * (CAP_SYS_NICE, or an RLIMIT_NICE that allows it): tried on a thread of its own. */
static void *probe_lowering_nice(void *arg) {
    int before = getpriority(PRIO_PROCESS, 0);
    *(bool *)arg = setpriority(PRIO_PROCESS, 0, before + 1) == 0 && setpriority(PRIO_PROCESS, 0, before) == 0;
    return NULL;
}

int spindle_test_monitor_baseline_in_forked_child(uint32_t timeout_ms) {
    RUN_IN_FORKED_CHILD(timeout_ms);
    /* Only this thread exists here: no spawner, no monitor. */
    pthread_t creator;
    spindle_pool *pool = NULL;
    if (pthread_create(&creator, NULL, demoted_creator, &pool) != 0) _exit(3);
    pthread_join(creator, NULL);
    if (!pool) _exit(4);
    pid_t monitor = 0;
    for (int tries = 0; tries < 2000 && !monitor; tries++) {
        DIR *tasks = opendir("/proc/self/task");
        if (!tasks) _exit(5);
        for (struct dirent *e; !monitor && (e = readdir(tasks));) {
            char path[300], name[32] = {0};
            snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
            FILE *f = fopen(path, "r");
            if (!f) continue;
            if (fgets(name, sizeof name, f) && strncmp(name, "spindle-monitor", 15) == 0)
                monitor = (pid_t)atoi(e->d_name);
            fclose(f);
        }
        closedir(tasks);
        if (!monitor) {
            struct timespec ms = {0, 1000000};
            nanosleep(&ms, NULL);
        }
    }
    if (!monitor) _exit(13);
    pid_t self = getpid();
    errno = 0;
    int nice_main = getpriority(PRIO_PROCESS, (id_t)self);
    int nice_monitor = getpriority(PRIO_PROCESS, (id_t)monitor);
    if (errno) _exit(10);
    if (sched_getscheduler(self) != sched_getscheduler(monitor)) _exit(11);
    cpu_set_t main_cpus, monitor_cpus;
    if (sched_getaffinity(self, sizeof main_cpus, &main_cpus) != 0 ||
        sched_getaffinity(monitor, sizeof monitor_cpus, &monitor_cpus) != 0 ||
        !CPU_EQUAL(&main_cpus, &monitor_cpus))
        _exit(12);
    if (nice_main != nice_monitor) {
        /* Without the privilege to lower a nice value, the spawner cannot take back what
         * its creator gave up (spawn.c), and the pool reports it: 14, not a failure. */
        bool may_lower = false;
        pthread_t probe;
        if (pthread_create(&probe, NULL, probe_lowering_nice, &may_lower) != 0) _exit(3);
        pthread_join(probe, NULL);
        _exit(may_lower ? 10 : spindle_pool_nice_error(pool) != 0 ? 14 : 15);
    }
    _exit(0);
}

int spindle_test_pool_in_forked_child(uint32_t timeout_ms) {
    RUN_IN_FORKED_CHILD(timeout_ms);
    /* Only this thread exists here; everything it calls is the engine's C. */
    static _Atomic int ran;
    spindle_config cfg;
    spindle_config_init(&cfg);
    cfg.workers = 2;
    cfg.pinning = SPINDLE_PIN_NONE;
    spindle_pool *pool;
    if (spindle_pool_create(&cfg, &pool) != 0) _exit(3);
    for (int i = 0; i < 100; i++)
        if (spindle_submit(pool, count_in_child, (void *)&ran) != 0) _exit(4);
    if (spindle_pool_destroy(pool, SPINDLE_SHUTDOWN_DRAIN) != 0) _exit(5);
    _exit(atomic_load_explicit(&ran, memory_order_relaxed) == 100 ? 0 : 6);
}

/* ---- refused threads, in a fresh process (spindle_test_refused_thread_in_forked_child) */

_Static_assert((int)SPINDLE_TEST_REFUSE_SPARE == (int)SPINDLE_SEAM_SPARE &&
                   (int)SPINDLE_TEST_REFUSE_SPAWNER == (int)SPINDLE_SEAM_SPAWNER &&
                   (int)SPINDLE_TEST_REFUSE_MONITOR == (int)SPINDLE_SEAM_SERVICE,
               "the tests' names for the kinds of thread are the engine's");

/* Two tasks of a one-worker pool: the first blocks (saying so) until the second has run
 * or `patience_ms` has passed; `second_ran_first` says which. */
typedef struct rendezvous {
    _Atomic int second_ran, first_done, second_during_first;
    uint32_t patience_ms;
    uint64_t blocked_ns; /* how long the first task blocked */
} rendezvous;

static void rendezvous_first(void *ctx, spindle_run_reason reason) {
    (void)reason;
    rendezvous *r = ctx;
    uint64_t start = spindle_now_ns();
    spindle_blocking_begin();
    for (uint32_t waited = 0; waited < r->patience_ms * 10; waited++) {
        if (atomic_load_explicit(&r->second_ran, memory_order_acquire)) {
            atomic_store_explicit(&r->second_during_first, 1, memory_order_relaxed);
            break;
        }
        struct timespec t = {0, 100000};
        nanosleep(&t, NULL);
    }
    spindle_blocking_end();
    r->blocked_ns = spindle_now_ns() - start;
    atomic_store_explicit(&r->first_done, 1, memory_order_release);
}

static void rendezvous_second(void *ctx, spindle_run_reason reason) {
    (void)reason;
    atomic_store_explicit(&((rendezvous *)ctx)->second_ran, 1, memory_order_release);
}

static int live_threads(void) {
    DIR *d = opendir("/proc/self/task");
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

/* A pool of one unpinned worker, for the tests in which a task blocks; NULL if it
 * could not be made. */
static spindle_pool *one_worker_pool(void) {
    spindle_config cfg;
    spindle_config_init(&cfg);
    cfg.workers = 1;
    cfg.pinning = SPINDLE_PIN_NONE;
    spindle_pool *pool;
    return spindle_pool_create(&cfg, &pool) == 0 ? pool : NULL;
}

/* In a forked child: every spare's thread refused from now on, counted from 0, each
 * refusal held until the test opens the gate if `gate`. */
static void refuse_spares(bool gate) {
    atomic_store_explicit(&spindle_test_refusals, 0, memory_order_relaxed);
    atomic_store_explicit(&spindle_test_refusal_gate, gate ? 1u : 0u, memory_order_relaxed);
    atomic_store_explicit(&spindle_test_refused_threads, SPINDLE_SEAM_SPARE, memory_order_relaxed);
}

/* In the child: a one-worker pool runs the rendezvous; 0 when both tasks ran, and the
 * second during the first's blocking exactly when `spare_expected`. */
static int run_rendezvous(bool spare_expected) {
    spindle_pool *pool = one_worker_pool();
    if (!pool) return 20;
    /* Long enough for a spare to start on a busy machine; a refused spare never does. */
    static rendezvous r;
    r.patience_ms = spare_expected ? 60000 : 300;
    if (spindle_submit(pool, rendezvous_first, &r) != 0) return 21;
    if (spindle_submit(pool, rendezvous_second, &r) != 0) return 22;
    if (spindle_pool_destroy(pool, SPINDLE_SHUTDOWN_DRAIN) != 0) return 23;
    /* Acquire: after destroy joined the workers, but the loads need no more. */
    if (!atomic_load_explicit(&r.first_done, memory_order_acquire)) return 24;
    if (!atomic_load_explicit(&r.second_ran, memory_order_acquire)) return 25;
    bool during = atomic_load_explicit(&r.second_during_first, memory_order_relaxed);
    if (during != spare_expected) return 26;
    /* A refused spare is tried again at most once per SPINDLE_SPARE_RETRY_NS (spare.c,
     * C4), however long its worker blocks, not in a loop on every CPU. */
    uint32_t refusals = atomic_load_explicit(&spindle_test_refusals, memory_order_relaxed);
    if (!spare_expected && refusals > r.blocked_ns / SPINDLE_SPARE_RETRY_NS + 3) return 27;
    return 0;
}

int spindle_test_refused_thread_in_forked_child(int kind, uint32_t timeout_ms) {
    RUN_IN_FORKED_CHILD(timeout_ms);
    /* The child: one thread, no spawner and no monitor yet (their atfork handlers). */
    atomic_store_explicit(&spindle_test_refused_threads, (uint32_t)kind, memory_order_relaxed);
    if (kind == SPINDLE_SEAM_SPAWNER) {
        /* No spawner, so no worker: creation fails with the system's error, and leaves
         * no thread behind. Once threads are allowed again, the next pool works. */
        spindle_config cfg;
        spindle_config_init(&cfg);
        cfg.workers = 2;
        cfg.pinning = SPINDLE_PIN_NONE;
        spindle_pool *pool = NULL;
        if (spindle_pool_create(&cfg, &pool) != EAGAIN || pool) _exit(10);
        if (live_threads() != 1) _exit(11);
        atomic_store_explicit(&spindle_test_refused_threads, 0, memory_order_relaxed);
        _exit(run_rendezvous(true));
    }
    /* A refused monitor: spares still stand in for work that says it blocks. A refused
     * spare: the blocked task's pool waits for it to return, and loses nothing. */
    _exit(run_rendezvous(kind == SPINDLE_SEAM_SERVICE));
}

/* Waits up to 60 s, in 1 ms steps, for `cond`; exits the child with `code` if it never
 * held. */
#define WAIT_OR_EXIT(cond, code)                                                                   \
    do {                                                                                           \
        for (int i_ = 0; !(cond); i_++) {                                                          \
            if (i_ == 60000) _exit(code);                                                          \
            nanosleep(&(struct timespec){0, 1000000}, NULL);                                       \
        }                                                                                          \
    } while (0)

/* In the child: the rendezvous on a one-worker pool whose spares are refused until the
 * first refusal; 0 when a spare then runs the second task during the first. With
 * `between_monitor_looks`, the monitor is held at its gate (seams.c) from the moment it
 * finds nothing to watch, the worker parked, until the first task has blocked and its
 * spare has been refused: the monitor's look before it sleeps must see the worker
 * counted out (spare.c, MI1), or nothing tries the spare again. */
static int spare_allowed_again(bool between_monitor_looks) {
    refuse_spares(false);
    if (between_monitor_looks) atomic_store_explicit(&spindle_test_monitor_gate, 1, memory_order_relaxed);
    spindle_pool *pool = one_worker_pool();
    if (!pool) return 30;
    /* Acquire pairs with the monitor's count at its gate. */
    if (between_monitor_looks)
        WAIT_OR_EXIT(atomic_load_explicit(&spindle_test_monitor_gated, memory_order_acquire) != 0, 37);
    /* The first task waits for the second as an operation waits for one queued behind
     * it: only a spare can run the second. The patience only bounds a failing run. */
    static rendezvous r;
    r.patience_ms = 60000;
    if (spindle_submit(pool, rendezvous_first, &r) != 0) return 31;
    if (spindle_submit(pool, rendezvous_second, &r) != 0) return 32;
    /* The first refusal: the worker has blocked and claimed a spare in vain. */
    WAIT_OR_EXIT(atomic_load_explicit(&spindle_test_refusals, memory_order_relaxed) != 0, 33);
    atomic_store_explicit(&spindle_test_refused_threads, 0, memory_order_relaxed);
    if (between_monitor_looks) {
        /* Release pairs with the gate's acquire: the monitor goes on after the above. */
        atomic_store_explicit(&spindle_test_monitor_gate, 0, memory_order_release);
        spindle_futex_wake(&spindle_test_monitor_gate, INT_MAX);
    }
    if (spindle_pool_destroy(pool, SPINDLE_SHUTDOWN_DRAIN) != 0) return 34;
    /* Acquire: after destroy joined the workers, but the loads need no more. */
    if (!atomic_load_explicit(&r.second_ran, memory_order_acquire)) return 35;
    return atomic_load_explicit(&r.second_during_first, memory_order_relaxed) ? 0 : 36;
}

int spindle_test_spare_allowed_again_in_forked_child(uint32_t timeout_ms) {
    RUN_IN_FORKED_CHILD(timeout_ms);
    _exit(spare_allowed_again(false));
}

int spindle_test_spare_allowed_again_between_monitor_looks_in_forked_child(uint32_t timeout_ms) {
    RUN_IN_FORKED_CHILD(timeout_ms);
    _exit(spare_allowed_again(true));
}

static _Atomic int first_may_return;

static void blocks_until_told(void *ctx, spindle_run_reason reason) {
    (void)ctx;
    (void)reason;
    spindle_blocking_begin();
    /* Acquire pairs with the test's release store. */
    while (!atomic_load_explicit(&first_may_return, memory_order_acquire)) {
        struct timespec t = {0, 100000};
        nanosleep(&t, NULL);
    }
    spindle_blocking_end();
}

static void *shut_down_pool(void *pool) {
    return (void *)(intptr_t)spindle_pool_shutdown(pool, SPINDLE_SHUTDOWN_DRAIN);
}

int spindle_test_spare_refused_during_shutdown_in_forked_child(uint32_t timeout_ms) {
    RUN_IN_FORKED_CHILD(timeout_ms);
    refuse_spares(true);
    spindle_pool *pool = one_worker_pool();
    if (!pool) _exit(40);
    static rendezvous r;
    if (spindle_submit(pool, blocks_until_told, NULL) != 0) _exit(41);
    if (spindle_submit(pool, rendezvous_second, &r) != 0) _exit(42);
    /* The worker blocked and claimed a spare; the spawner holds its refusal. */
    WAIT_OR_EXIT(atomic_load_explicit(&spindle_test_refusals, memory_order_relaxed) != 0, 43);
    pthread_t shutter;
    if (pthread_create(&shutter, NULL, shut_down_pool, pool) != 0) _exit(44);
    WAIT_OR_EXIT(spindle_pool_is_shutting_down(pool), 45);
    /* Now the worker runs the rest and parks, while the spare still counts as running:
     * the pool is not quiescent yet. */
    atomic_store_explicit(&first_may_return, 1, memory_order_release);
    WAIT_OR_EXIT(spindle_pool_parked(pool) == 1, 46);
    /* The refusal: the last count that kept the pool from terminating goes. */
    atomic_store_explicit(&spindle_test_refusal_gate, 0, memory_order_release);
    spindle_futex_wake(&spindle_test_refusal_gate, INT_MAX);
    void *rc;
    if (pthread_join(shutter, &rc) != 0 || rc != NULL) _exit(47);
    spindle_pool_free(pool);
    /* Acquire: after the shutdown joined the workers, but the load needs no more. */
    _exit(atomic_load_explicit(&r.second_ran, memory_order_acquire) ? 0 : 48);
}

/* Tasks that each wait until the test lets them return, for at most 60 s; while they
 * wait, the pool's two workers run one each. They yield rather than sleep: a worker that
 * stays runnable is never taken for blocked by the monitor, which would have a spare
 * run the other task. */
static _Atomic int both_running, both_may_return;

/* Every test that uses them starts here: the parent process may have run another. */
static void yielders_reset(void) {
    atomic_store_explicit(&both_running, 0, memory_order_relaxed);
    atomic_store_explicit(&both_may_return, 0, memory_order_relaxed);
}

static void yield_until_told(void *ctx, spindle_run_reason reason) {
    (void)ctx;
    (void)reason;
    atomic_fetch_add_explicit(&both_running, 1, memory_order_relaxed);
    uint64_t deadline = spindle_now_ns() + 60000000000ull;
    while (!atomic_load_explicit(&both_may_return, memory_order_relaxed) && spindle_now_ns() < deadline)
        sched_yield();
}

/* In a forked child, the monitor's counts as the parent's monitor left them: from here,
 * the child's own. */
static void monitor_counts_reset(void) {
    atomic_store_explicit(&spindle_test_monitor_naps, 0, memory_order_relaxed);
    atomic_store_explicit(&spindle_test_monitor_wakes, 0, memory_order_relaxed);
}

int spindle_test_resumed_worker_wakes_monitor_in_forked_child(uint32_t timeout_ms) {
    RUN_IN_FORKED_CHILD(timeout_ms);
    monitor_counts_reset();
    yielders_reset();
    /* A process-wide kind of pool: only those follow an active limit (W6). */
    spindle_config cfg;
    spindle_config_init(&cfg);
    cfg.workers = 2;
    cfg.pinning = SPINDLE_PIN_NONE;
    cfg.permanent = true;
    spindle_pool *pool;
    if (spindle_pool_create(&cfg, &pool) != 0) _exit(50);
    if (spindle_pool_set_active_workers(pool, 2) != 0) _exit(51);
    for (int i = 0; i < 2; i++)
        if (spindle_submit(pool, yield_until_told, NULL) != 0) _exit(52);
    WAIT_OR_EXIT(atomic_load_explicit(&both_running, memory_order_relaxed) == 2, 53);
    /* Worker 1 retires once its task returns; worker 0 parks. Every worker is then
     * parked or retired, and the monitor goes to sleep. */
    if (spindle_pool_set_active_workers(pool, 1) != 0) _exit(54);
    atomic_store_explicit(&both_may_return, 1, memory_order_relaxed);
    WAIT_OR_EXIT(atomic_load_explicit(&pool->retired, memory_order_relaxed) == 1 &&
                     spindle_pool_parked(pool) == 1,
                 55);
    for (int i = 0; atomic_load_explicit(&spindle_test_monitor_naps, memory_order_relaxed) <=
                    atomic_load_explicit(&spindle_test_monitor_wakes, memory_order_relaxed);
         i++) {
        if (i == 60000) {
            /* What the monitor's looks read (spare.c, pool_has_watch), for the report. */
            pthread_mutex_lock(&pool->idle.lock);
            uint64_t st = atomic_load_explicit(&pool->idle.state, memory_order_seq_cst);
            uint32_t blocked = pool->blocked, spares = pool->spares_live;
            pthread_mutex_unlock(&pool->idle.lock);
            fprintf(stderr,
                    "monitor awake: unparked %u, searching %u, retired %u, blocked %u, parked %u, spares %u, "
                    "active limit %u, naps %u, wakes %u\n",
                    SPINDLE_UNPARKED(st), SPINDLE_SEARCHING(st),
                    atomic_load_explicit(&pool->retired, memory_order_relaxed), blocked, spindle_pool_parked(pool),
                    spares, atomic_load_explicit(&pool->active_limit, memory_order_relaxed),
                    atomic_load_explicit(&spindle_test_monitor_naps, memory_order_relaxed),
                    atomic_load_explicit(&spindle_test_monitor_wakes, memory_order_relaxed));
            _exit(56);
        }
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    uint32_t wakes = atomic_load_explicit(&spindle_test_monitor_wakes, memory_order_relaxed);
    /* Worker 1 runs again, and nothing else happens in the process: only its return
     * from retirement can wake the monitor (MI1). */
    if (spindle_pool_set_active_workers(pool, 2) != 0) _exit(57);
    WAIT_OR_EXIT(atomic_load_explicit(&spindle_test_monitor_wakes, memory_order_relaxed) != wakes, 58);
    _exit(0);
}

/* ---- a pool half registered at fork() (spindle_test_pool_half_registered_at_fork) ---- */

static void *create_one_worker_pool(void *out) {
    *(spindle_pool **)out = one_worker_pool();
    return NULL;
}

/* In the grandchild, forked while `half` stood between its registrations with its
 * worker running: the copy of `half` has no threads here. The monitor this process
 * starts with a pool of its own must go to sleep once that pool is idle, and `half`
 * must refuse work as every inherited pool does. */
static int monitor_sleeps_beside(spindle_pool *half) {
    atomic_store_explicit(&spindle_test_registration_gate, 0, memory_order_relaxed);
    monitor_counts_reset();
    spindle_pool *pool = one_worker_pool();
    if (!pool) return 65;
    static _Atomic int ran;
    if (spindle_submit(pool, count_in_child, (void *)&ran) != 0) return 66;
    WAIT_OR_EXIT(atomic_load_explicit(&ran, memory_order_relaxed) == 1, 67);
    WAIT_OR_EXIT(atomic_load_explicit(&spindle_test_monitor_naps, memory_order_relaxed) >
                     atomic_load_explicit(&spindle_test_monitor_wakes, memory_order_relaxed),
                 68);
    if (spindle_submit(half, count_in_child, (void *)&ran) != ECHILD) return 69;
    return spindle_pool_destroy(pool, SPINDLE_SHUTDOWN_DRAIN) == 0 ? 0 : 70;
}

int spindle_test_pool_half_registered_at_fork(uint32_t timeout_ms) {
    RUN_IN_FORKED_CHILD(timeout_ms);
    /* The child: one thread, no spawner and no monitor yet. Its first pool's creator
     * stops between the pool's two registrations (seams.c). */
    yielders_reset();
    atomic_store_explicit(&spindle_test_registration_gate, 1, memory_order_relaxed);
    pthread_t creator;
    spindle_pool *made = NULL, *half = NULL;
    if (pthread_create(&creator, NULL, create_one_worker_pool, &made) != 0) _exit(60);
    /* Acquire pairs with the seam's release: the pool is made. */
    WAIT_OR_EXIT((half = atomic_load_explicit(&spindle_test_registration_gated_pool, memory_order_acquire)), 61);
    /* Its worker runs (yield_until_told, above), so that any copy of this process shows
     * it unparked. */
    if (spindle_submit(half, yield_until_told, NULL) != 0) _exit(62);
    WAIT_OR_EXIT(atomic_load_explicit(&both_running, memory_order_relaxed) == 1, 63);
    pid_t grandchild = fork();
    if (grandchild < 0) _exit(64);
    if (grandchild == 0) _exit(monitor_sleeps_beside(half));
    int status = wait_for_child(grandchild, 100000);
    atomic_store_explicit(&both_may_return, 1, memory_order_relaxed);
    /* Release pairs with the gate's acquire. */
    atomic_store_explicit(&spindle_test_registration_gate, 0, memory_order_release);
    spindle_futex_wake(&spindle_test_registration_gate, INT_MAX);
    pthread_join(creator, NULL);
    if (made != half || spindle_pool_destroy(made, SPINDLE_SHUTDOWN_DRAIN) != 0) _exit(71);
    _exit(status);
}

/* spindle_test_outside_join_sleeps_when_pool_awake: the helper that lets the tasks
 * (yield_until_told, above) return once the outside join's wait has cut its spin, or
 * after 60 s, so that a wait that spins on still returns and the test reports it. */
static void *release_after_spin_cut(void *arg) {
    uint32_t before = (uint32_t)(uintptr_t)arg;
    for (int i = 0; i < 60000 && atomic_load_explicit(&spindle_test_spin_cuts, memory_order_relaxed) == before; i++)
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    atomic_store_explicit(&both_may_return, 1, memory_order_relaxed);
    return NULL;
}

static void offered_nothing(void *ctx) { (void)ctx; }

int spindle_test_outside_join_sleeps_when_pool_awake(void) {
    yielders_reset();
    spindle_config cfg;
    spindle_config_init(&cfg);
    cfg.workers = 2;
    cfg.pinning = SPINDLE_PIN_NONE;
    spindle_pool *pool;
    if (spindle_pool_create(&cfg, &pool) != 0) return 50;
    int submitted = 0;
    while (submitted < 2 && spindle_submit(pool, yield_until_told, NULL) == 0) submitted++;
    int status = submitted == 2 ? 0 : 51;
    for (int i = 0; status == 0 && atomic_load_explicit(&both_running, memory_order_relaxed) < 2; i++) {
        if (i == 60000) status = 52;
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    uint32_t before = atomic_load_explicit(&spindle_test_spin_cuts, memory_order_relaxed);
    pthread_t helper;
    if (status == 0 && pthread_create(&helper, NULL, release_after_spin_cut, (void *)(uintptr_t)before) != 0)
        status = 53;
    if (status == 0) {
        spindle_join_frame frame = {0};
        frame.fn = offered_nothing;
        spindle_fork(pool, &frame);
        if (spindle_join(pool, &frame)) offered_nothing(NULL);
        pthread_join(helper, NULL);
        if (atomic_load_explicit(&spindle_test_spin_cuts, memory_order_relaxed) == before) status = 54;
    }
    atomic_store_explicit(&both_may_return, 1, memory_order_relaxed);
    if (spindle_pool_destroy(pool, SPINDLE_SHUTDOWN_DRAIN) != 0 && status == 0) status = 55;
    return status;
}

void spindle_test_log(spindle_log_level level, const char *message) { spindle_log(level, "%s", message); }

size_t spindle_test_plan_bytes(const spindle_plan *p) {
    if (!p) return 0;
    return sizeof *p + sizeof(plan_worker) * p->nworkers + sizeof(uint32_t) * p->nworkers +
           sizeof(spindle_tier) * p->remote_at[p->ngroups] + sizeof(uint32_t) * 2 * (p->ngroups + 1) +
           sizeof(int32_t) * p->cpus_at[p->ngroups];
}

size_t spindle_test_pool_placement_bytes(const spindle_pool *pool) {
    size_t bytes = spindle_test_plan_bytes(pool->plan);
    for (uint32_t i = 0; i < pool->nworkers; i++) bytes += pool->workers[i]->block_bytes;
    if (pool->ordered != pool->workers) bytes += sizeof(spindle_worker *) * pool->nworkers;
    return bytes;
}


void spindle_test_set_latch_wake_delay_ns(uint64_t ns) {
    /* Relaxed: a test sets it before the joins it affects and clears it after. */
    atomic_store_explicit(&spindle_test_latch_wake_delay, ns, memory_order_relaxed);
}

uint32_t spindle_test_pool_task_sleepers(spindle_pool *pool) {
    pthread_mutex_lock(&pool->idle.lock);
    uint32_t n = pool->idle.task_sleepers;
    pthread_mutex_unlock(&pool->idle.lock);
    return n;
}

int spindle_test_confine_workers(spindle_pool *pool, int cpu) {
    size_t size = CPU_ALLOC_SIZE(SPINDLE_MAX_CPUS);
    cpu_set_t *set = CPU_ALLOC(SPINDLE_MAX_CPUS);
    if (!set) return ENOMEM;
    int rc = 0;
    for (uint32_t i = 0; i < pool->nworkers && rc == 0; i++) {
        spindle_worker *w = pool->workers[i];
        if (cpu >= 0) {
            CPU_ZERO_S(size, set);
            CPU_SET_S((size_t)cpu, size, set);
        } else if (!spindle_worker_cpus(w, set)) {
            continue;
        }
        /* Relaxed: the id was stored before the pool's creation returned. */
        pid_t tid = atomic_load_explicit(&w->tid, memory_order_relaxed);
        if (sched_setaffinity(tid, size, set) != 0) rc = errno;
    }
    CPU_FREE(set);
    return rc;
}

uint32_t spindle_test_pool_spreads(spindle_pool *pool) {
    return atomic_load_explicit(&pool->spreads, memory_order_relaxed);
}


void spindle_test_set_deep_join_waits(bool deep) {
    /* Relaxed: read by threads that start after this returns (pthread_create orders it). */
    atomic_store_explicit(&spindle_test_join_floor, deep ? SIZE_MAX : 0, memory_order_relaxed);
}

void spindle_test_set_join_wait_floor(size_t bytes) {
    /* Relaxed, both: the floor as above; the record is a maximum that only tests read,
     * after joins whose latches ordered the waits' writes before their return. */
    atomic_store_explicit(&spindle_test_deepest_join, 0, memory_order_relaxed);
    atomic_store_explicit(&spindle_test_join_floor, bytes, memory_order_relaxed);
}

size_t spindle_test_deepest_join_wait(void) {
    /* Relaxed: see above. */
    return atomic_load_explicit(&spindle_test_deepest_join, memory_order_relaxed);
}

#else

/* ISO C wants a translation unit to declare something. */
typedef int spindle_testing_needs_a_debug_build;

#endif
