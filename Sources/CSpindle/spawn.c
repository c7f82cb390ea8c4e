/*
 * spawn.c — the one thread that starts every worker.
 *
 * The problem. A Linux thread starts with its creator's scheduling policy and nice
 * value, and an unprivileged thread can never get back what it gave up: a nice value
 * once raised cannot be lowered (RLIMIT_NICE is 0 by default), and a SCHED_IDLE thread
 * cannot leave SCHED_IDLE (sched(7): since 2.6.39 only within RLIMIT_NICE). Pools are
 * created lazily, often from inside other pools' work: the userInteractive class's
 * pool is created by the first userInteractive operation, which a background operation
 * may add. If the creating thread started the workers, they would begin at
 * SCHED_IDLE and nice +10; a pool asking for nice -4 is refused without privilege
 * (EACCES) and its workers would then stay there, interactive work running at the
 * lowest priority the kernel has. Even a privileged process got the policy wrong: a
 * SCHED_OTHER pool never set its policy, so its workers kept the creator's SCHED_BATCH
 * or SCHED_IDLE (found by a test that created the default class's pool from a utility
 * worker).
 *
 * The fix. No pool starts its own workers. One thread per process, the spawner, starts
 * them all, and the monitor (spare.c) too, which would otherwise keep the CPUs, nice
 * and policy of whichever thread made the first pool. The first spindle_pool_create starts the spawner (no worker exists before
 * the first pool, so its creator is never a Spindle worker); the spawner then adopts
 * the process's own policy and nice — the main thread's, which is what `nice`,
 * `renice -p` and `chrt` set — and sleeps until asked for threads. Every worker is its
 * child, so it begins at the process's baseline whoever created its pool, and then
 * moves to its pool's nice and policy (worker.c, apply_priority and W7). A worker thus only
 * ever moves away from the baseline, which needs privilege exactly when the pool asks
 * for a nice below the process's (normally: a negative one) — the one refusal the pool
 * already reports.
 *
 * What is not one-way a worker still takes from its pool's creator, as a thread the
 * creator started would: the CPU mask its pool was planned for (the creator's, unless
 * the creator is itself a pinned worker: affinity.c, "Whose CPUs") and the creator's
 * signal mask (a service that blocks SIGTERM in every thread but one that sigwait()s
 * for it must not find it delivered to a worker). Each request carries both. The
 * spawner itself blocks signals, for the same reason (all but the synchronous faults and
 * SIGPROF, which a crash's backtrace needs: spindle_start_service_thread); it takes the requester's
 * signal mask only while it starts that requester's threads, so what it could receive
 * then is what the requester could.
 *
 * The baseline is read once, when the spawner starts: re-nicing the main thread later
 * does not move pools created afterwards (it does not move the existing workers either).
 *
 * Rejected:
 *   - Each worker resetting itself to the baseline. Lowering nice or leaving SCHED_IDLE
 *     is exactly what an unprivileged thread may not do.
 *   - pthread attributes with PTHREAD_EXPLICIT_SCHED: glibc applies the policy with the
 *     same sched_setscheduler the kernel refuses, and nice is not a pthread attribute.
 *   - Starting the spawner only when a creator is demoted: it would then be the child
 *     of that demoted thread.
 *   - Creating every class's pool up front: a process that uses one class would pay
 *     for the threads of all five, and
 *     pools a user creates from inside work would still inherit.
 *
 * Cost: one thread per process, asleep on a condition variable (with a worker's stack,
 * since it may become one, of which it touches a few pages), and one hand-off per pool
 * creation, small beside starting the workers themselves.
 *
 * A process the system gives no worker thread (a thread limit, RLIMIT_NPROC or a
 * container's pids.max, already reached): the spawner is a thread that exists, so a
 * process-wide pool of one worker takes it as that worker (SP1, becomes_the_worker),
 * and the process's work runs, slowly, instead of nowhere. Running work on the
 * submitting thread instead was rejected: an executor must not run a job inside its
 * `enqueue`, a submitter may hold a lock the work takes, and an operation that adds the
 * next one would recurse.
 *
 * fork(): the child has no spawner (fork copies only the calling thread), and the lock
 * may have been held by a thread that does not exist there. The child handler resets
 * both, so a pool created in the child starts a new spawner. Pools created before the
 * fork have no workers in the child, as with any thread pool.
 */
#include "internal.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

typedef struct spawn_request {
    spindle_pool *pool;
    /* NULL: start the pool's workers, and answer. A spare: start its thread alone,
     * detached, and free the request (nobody waits for the answer). */
    spindle_worker *spare;
    /* Non-NULL (and `pool` NULL): start a service thread running this, and answer. */
    void *(*service)(void *);
    cpu_set_t *affinity; /* the pool's planned CPUs (pool->affinity), or NULL */
    size_t affinity_size;
    sigset_t sigmask;    /* the creator's blocked signals */
    uint32_t started;    /* written by the spawner: threads started, in worker order */
    int rc;              /* written by the spawner: the first pthread_create error */
    bool done;
    struct spawn_request *next;
} spawn_request;

/* All state below is guarded by `lock`; none of it is on a hot path. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;     /* a request is queued */
static pthread_cond_t answered = PTHREAD_COND_INITIALIZER; /* a request is done */
static bool running;
static bool atfork_registered;
static spawn_request *pending;
static int baseline_nice_error, baseline_policy_error;

static void reset_in_child(void) {
    pthread_mutex_init(&lock, NULL);
    pthread_cond_init(&wake, NULL);
    pthread_cond_init(&answered, NULL);
    running = false;
    pending = NULL;
    baseline_nice_error = baseline_policy_error = 0; /* the next spawner tries afresh */
}

/* Takes the main thread's policy and nice (tid == pid). Errors are kept for the pools
 * that inherit them (spindle_spawn_workers). A main thread that cannot be read (it has
 * exited) leaves the spawner with its creator's. */
static void adopt_process_baseline(void) {
    pid_t main_tid = getpid();
    /* And the process's CPUs (affinity.c, "Whose CPUs"), not those of the thread that
     * happened to start the spawner; each worker then gets its pool's own mask. */
    cpu_set_t *cpus = spindle_process_affinity();
    if (cpus) {
        pthread_setaffinity_np(pthread_self(), CPU_ALLOC_SIZE(SPINDLE_MAX_CPUS), cpus);
        CPU_FREE(cpus);
    }
    int policy = sched_getscheduler(main_tid);
    struct sched_param param;
    if (policy >= 0 && sched_getparam(main_tid, &param) == 0) {
        /* The main thread's reset-on-fork flag is its own business, not a policy. */
        policy &= ~SCHED_RESET_ON_FORK;
        int mine_policy;
        struct sched_param mine;
        if (pthread_getschedparam(pthread_self(), &mine_policy, &mine) == 0 &&
            (mine_policy != policy || mine.sched_priority != param.sched_priority)) {
            int rc = pthread_setschedparam(pthread_self(), policy, &param);
            if (rc) baseline_policy_error = rc;
        }
    }
    errno = 0;
    int nice = getpriority(PRIO_PROCESS, (id_t)main_tid);
    if (errno == 0) {
        errno = 0;
        int mine = getpriority(PRIO_PROCESS, 0);
        /* PRIO_PROCESS with 0 is the calling thread on Linux. */
        if (errno == 0 && mine != nice && setpriority(PRIO_PROCESS, 0, nice) != 0)
            baseline_nice_error = errno;
    }
}

/* Starts `r`'s workers in worker order, with the requester's signal mask and the pool's
 * CPU mask; sets *started and returns 0 or the first pthread_create error. glibc applies
 * the CPU mask before the thread runs, and fails the create with EINVAL when the kernel
 * refuses it (a cpuset that shrank since the pool was planned): not worth failing the
 * pool for, so the rest start without it — workers with a plan pin themselves anyway. */
static int start_workers(const spawn_request *r, uint32_t *started) {
    *started = 0;
    pthread_attr_t attr;
    int rc = pthread_attr_init(&attr);
    if (rc) return rc;
    bool masked =
        r->affinity && pthread_attr_setaffinity_np(&attr, r->affinity_size, r->affinity) == 0;
    sigset_t own; /* the spawner's own mask, restored after */
    pthread_sigmask(SIG_SETMASK, &r->sigmask, &own); /* new threads inherit it */
    while (*started < r->pool->nworkers) {
        spindle_worker *w = r->pool->workers[*started];
        rc = spindle_test_thread_allowed(*started) ? pthread_create(&w->thread, &attr, spindle_worker_main, w) : EAGAIN;
        if (rc == EINVAL && masked) {
            pthread_attr_destroy(&attr);
            pthread_attr_init(&attr);
            masked = false;
            continue;
        }
        if (rc) break;
        (*started)++;
    }
    pthread_sigmask(SIG_SETMASK, &own, NULL);
    pthread_attr_destroy(&attr);
    return rc;
}

/* Starts a spare's thread, detached, with the requester's signal mask and the pool's
 * CPU mask (as start_workers); a failure gives the slot back. */
static void start_spare(const spawn_request *r) {
    pthread_attr_t attr;
    int rc = pthread_attr_init(&attr);
    if (rc == 0) {
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        bool masked =
            r->affinity && pthread_attr_setaffinity_np(&attr, r->affinity_size, r->affinity) == 0;
        sigset_t own;
        pthread_sigmask(SIG_SETMASK, &r->sigmask, &own);
        rc = spindle_seam_thread_refused(SPINDLE_SEAM_SPARE)
                 ? EAGAIN
                 : pthread_create(&r->spare->thread, &attr, spindle_worker_main, r->spare);
        if (rc == EINVAL && masked) {
            pthread_attr_destroy(&attr);
            pthread_attr_init(&attr);
            pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
            rc = pthread_create(&r->spare->thread, &attr, spindle_worker_main, r->spare);
        }
        pthread_sigmask(SIG_SETMASK, &own, NULL);
        pthread_attr_destroy(&attr);
    }
    if (rc) spindle_spare_start_failed(r->pool, r->spare);
}

static int start_spawner_locked(void);

/* Answers every queued request with `rc`, when no spawner can be started to serve
 * them. Called with `lock` held; returns the spare requests, which the caller fails
 * once it has let go of `lock` (spindle_spare_start_failed takes the idle lock, which
 * is never taken before this one, and stays so). */
static spawn_request *fail_pending_locked(int rc) {
    spawn_request *spares = NULL;
    while (pending) {
        spawn_request *r = pending;
        pending = r->next;
        if (r->spare) {
            r->next = spares;
            spares = r;
            continue;
        }
        r->started = 0;
        r->rc = rc;
        r->done = true;
    }
    pthread_cond_broadcast(&answered);
    return spares;
}

/* SP1, the last worker. A process-wide pool of one worker whose thread the system refused
 * (`rc`: a thread limit, or no memory for a stack) gets this thread, the spawner, as its
 * worker: the process's own work then still runs, on a thread that was already there,
 * rather than nowhere. The request is answered as if the worker had started; the next
 * request starts a new spawner, or, while the system still refuses threads, fails
 * (pools of the user's see the error; the other classes share this pool: QoSPools).
 * Process-wide pools never shut down, so this thread never needs to return here.
 * Returns false, and changes nothing, for any other request. */
static bool becomes_the_worker(spawn_request *r, int rc) {
    spindle_pool *pool = r->pool;
    if (!pool->permanent || pool->nworkers != 1 || (rc != EAGAIN && rc != ENOMEM && rc != EPERM)) return false;
    spindle_worker *w = pool->workers[0];
    sigset_t sigmask = r->sigmask; /* r lives on its requester's stack: copied first */
    if (r->affinity) pthread_setaffinity_np(pthread_self(), r->affinity_size, r->affinity);
    w->thread = pthread_self();
    pthread_mutex_lock(&lock);
    r->started = 1;
    r->rc = 0;
    r->done = true;
    pthread_cond_broadcast(&answered);
    running = false;
    spawn_request *spares = NULL;
    if (pending) {
        int again = start_spawner_locked();
        if (again) spares = fail_pending_locked(again);
    }
    pthread_mutex_unlock(&lock);
    while (spares) {
        spawn_request *next = spares->next;
        spindle_spare_start_failed(spares->pool, spares->spare);
        free(spares);
        spares = next;
    }
    spindle_log(SPINDLE_LOG_WARNING,
                "the system refused every worker thread (%s): a process-wide pool runs on Spindle's spawner "
                "thread, its only worker",
                strerror(rc));
    pthread_sigmask(SIG_SETMASK, &sigmask, NULL);
    spindle_worker_main(w);
    return true;
}

static void *spawner_main(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "spindle-spawn");
    pthread_mutex_lock(&lock);
    adopt_process_baseline();
    for (;;) {
        while (!pending) pthread_cond_wait(&wake, &lock);
        spawn_request *r = pending;
        pending = r->next;
        /* Unlocked while starting threads: other creators may queue meanwhile. */
        pthread_mutex_unlock(&lock);
        if (r->spare) {
            start_spare(r);
            free(r);
            pthread_mutex_lock(&lock);
            continue;
        }
        uint32_t started = 0;
        int rc = r->service ? spindle_start_service_thread(r->service, false) : start_workers(r, &started);
        if (rc && !r->service && becomes_the_worker(r, rc)) return NULL;
        pthread_mutex_lock(&lock);
        r->started = started;
        r->rc = rc;
        r->done = true;
        pthread_cond_broadcast(&answered);
    }
    return NULL;
}

/* Called with `lock` held. */
static int start_spawner_locked(void) {
    if (running) return 0;
    if (!atfork_registered) {
        int rc = pthread_atfork(NULL, NULL, reset_in_child);
        if (rc) return rc;
        atfork_registered = true;
    }
    int rc = spindle_start_service_thread(spawner_main, true);
    if (rc) return rc;
    running = true;
    return 0;
}

int spindle_start_service_thread(void *(*main_fn)(void *), bool worker_stack) {
    pthread_attr_t attr;
    int rc = pthread_attr_init(&attr);
    if (rc) return rc;
    /* A small stack, of which the thread touches a few pages; a worker's (the system's
     * default), for the spawner, which may become one (SP1) and then runs user code. */
    if (!worker_stack) pthread_attr_setstacksize(&attr, 256 * 1024);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    /* Signals blocked, around its creation (a thread inherits the mask), then ours
     * restored: a process that directs a signal to one thread (sigwait on SIGTERM, say)
     * must not find it delivered here. Left open: the synchronous faults, so that a
     * crash here reaches the crash handler, and SIGPROF, one of the signals Swift's
     * crash handler suspends threads with (SIGUSR1, SIGUSR2, SIGPROF: the first one a
     * thread does not block), so that a crash's backtrace includes these threads. */
    sigset_t all, mine;
    sigfillset(&all);
    static const int open_signals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP, SIGABRT, SIGPROF};
    for (size_t k = 0; k < sizeof open_signals / sizeof open_signals[0]; k++) sigdelset(&all, open_signals[k]);
    pthread_sigmask(SIG_SETMASK, &all, &mine);
    pthread_t t;
    rc = spindle_seam_thread_refused(worker_stack ? SPINDLE_SEAM_SPAWNER : SPINDLE_SEAM_SERVICE)
             ? EAGAIN
             : pthread_create(&t, &attr, main_fn, NULL);
    pthread_sigmask(SIG_SETMASK, &mine, NULL);
    pthread_attr_destroy(&attr);
    return rc;
}

/* Queues `r` for the spawner, starting it if needed. Called with `lock` held. */
static int enqueue_locked(spawn_request *r) {
    int rc = start_spawner_locked();
    if (rc) return rc;
    spawn_request **tail = &pending;
    while (*tail) tail = &(*tail)->next;
    *tail = r;
    pthread_cond_signal(&wake);
    return 0;
}

int spindle_spawn_spare(spindle_pool *pool, spindle_worker *w) {
    spawn_request *r = calloc(1, sizeof *r);
    if (!r) return ENOMEM;
    r->pool = pool;
    r->spare = w;
    r->affinity = pool->affinity;
    r->affinity_size = CPU_ALLOC_SIZE(SPINDLE_MAX_CPUS);
    pthread_sigmask(SIG_SETMASK, NULL, &r->sigmask);
    pthread_mutex_lock(&lock);
    int rc = enqueue_locked(r);
    pthread_mutex_unlock(&lock);
    if (rc) free(r);
    return rc;
}

/* Queues `r` (with the caller's signal mask) and waits for the spawner's answer: 0, or
 * the error. Called with `lock` held; holds it again on return. */
static int request_locked(spawn_request *r) {
    pthread_sigmask(SIG_SETMASK, NULL, &r->sigmask);
    int rc = enqueue_locked(r);
    if (rc) return rc;
    while (!r->done) pthread_cond_wait(&answered, &lock);
    return r->rc;
}

int spindle_spawn_service_thread(void *(*main_fn)(void *)) {
    spawn_request r = {.service = main_fn};
    pthread_mutex_lock(&lock);
    int rc = request_locked(&r);
    pthread_mutex_unlock(&lock);
    return rc;
}

int spindle_spawn_workers(spindle_pool *pool, uint32_t *started) {
    spawn_request r = {.pool = pool, .affinity = pool->affinity,
                       .affinity_size = CPU_ALLOC_SIZE(SPINDLE_MAX_CPUS)};
    pthread_mutex_lock(&lock);
    int rc = request_locked(&r);
    if (r.done) {
        /* A pool that inherits the baseline inherits the spawner's failure to reach it. */
        if (pool->requested_nice == SPINDLE_NICE_INHERIT && baseline_nice_error)
            spindle_report_first_error(&pool->nice_error, baseline_nice_error);
        if (pool->requested_policy == SPINDLE_POLICY_NORMAL && baseline_policy_error)
            spindle_report_first_error(&pool->policy_error, baseline_policy_error);
    }
    pthread_mutex_unlock(&lock);
    *started = r.started;
    return rc;
}
