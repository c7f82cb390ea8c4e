/*
 * spare.c — spare workers for workers blocked inside a task, and the monitor that finds
 * blocking Spindle cannot see.
 *
 * The problem. A pool has one worker per CPU, and work blocks: it sleeps, takes locks,
 * waits on semaphores, does synchronous I/O, waits for other work. A blocked worker
 * holds a CPU's share of the pool and uses none of it; when every worker blocks on
 * work that is still queued behind them (a rendezvous of more operations than
 * workers, an operation waiting for one it added), the pool deadlocks. Foundation's
 * queue on Linux runs on Dispatch, whose workqueue monitor adds threads when its
 * workers block; Go's sysmon hands a blocked thread's P to another thread; Java's
 * ForkJoinPool starts compensation threads (ManagedBlocker); tokio has
 * block_in_place. Spindle does what they share: it counts a blocked worker out, and
 * lets a spare worker run in its place.
 *
 * Counting out. The idle accounting (park.c) counts the workers that are not parked,
 * and a submission wakes a sleeper only while fewer than `nworkers` are. A worker that
 * blocks inside a task is counted out for as long as it blocks (one RMW on the idle
 * word, and `blocked`, under the idle lock): submissions then wake a sleeper for the
 * work it cannot do, and, when no worker is parked, spindle_wake_one claims a spare
 * (spindle_claim_spare_locked) and has the spawner start its thread. So the pool keeps
 * `nworkers` threads running its work while some are blocked — no more: a spare that
 * finds nothing parks like any worker, and exits after `spare_idle_ns` without work.
 * When the blocked worker returns it is counted in again, and for a moment the pool
 * runs one thread more than it has CPUs, until a searcher finds nothing and parks.
 * A worker counted out finds the work already queued itself (the last step of
 * count_out): a submitter that saw it counted in woke nobody, which is the Dekker
 * pairing of park.c again (our RMW and fence, then a look at the queues; its push and
 * fence, then a look at the counts).
 *
 * Who is counted out.
 *   1. Code that says it blocks: spindle_blocking_begin/end, which Spindle's own
 *      blocking waits use (an operation's waitUntilFinished, a wait on another pool's
 *      work) and which the Swift façade offers as ThreadPool.blocking.
 *   2. Code that does not say so, found by the monitor: one thread for the process
 *      that, while any pool has a worker running, looks at each worker every tick. A
 *      worker inside the same task as at the last tick, whose thread used less than
 *      half a tick of CPU since (its thread CPU clock) and is asleep in the kernel (its
 *      state in /proc, read only then: a runnable thread kept off its CPU by a busy
 *      machine is not blocked), is blocked; it is counted out while it stays so and
 *      work is waiting, and in again at the first tick that finds
 *      it running or out of that task. A worker inside code of kind 1 is left to it.
 *      The tick is 1 ms while some worker sits in one task across ticks, 10 ms
 *      otherwise, and the monitor sleeps on a futex while every worker of every pool
 *      is parked or retired and none is counted out (MI1), so an idle process pays
 *      nothing for it.
 *
 * What a spare is. A worker in a slot after the pool's own (workers[nworkers...]),
 * made on first need and reused after its thread exits: started by the spawner, so it
 * takes the pool's nice and policy exactly as the pool's workers do (spawn.c),
 * unpinned within the pool's CPUs. It takes work from the injector and by stealing,
 * one task at a time; what it spawns goes to the injector, never to its own deque,
 * which no worker steals from (the pool's steal orders are fixed at creation). So a
 * spare's join waits take unrelated work from the injector at every level, which
 * nests on its stack until the stack floor stops it (worker.c, W4). At most
 * `max_spares` run at once per pool, so blocking cannot turn into a thread
 * explosion; beyond that, work waits for a worker to return.
 *
 * Rejected:
 *   - Helping instead of blocking (a waiting worker running other tasks, as fork-join's
 *     join does): right for join, whose contract is help-first, wrong for waits whose
 *     contract is to block the thread. A nested task runs inside the waiter's critical
 *     sections (a plain lock deadlocks, a recursive one admits it) and sees its
 *     thread-local state; and a task blocked on a foreign semaphore cannot help at all.
 *   - Handing the blocked worker's deque to a new thread (Go's P hand-off): the worker
 *     returns from its wait with no deque of its own, so everything it spawns after
 *     the wait needs a second path; spares that keep nothing in their deques give the
 *     same compensation with one path.
 *   - A timer per worker, or a clock read per task, to detect blocking: the task path
 *     is Spindle's hottest; the monitor reads two counters each worker already
 *     keeps, and the CPU clock only of workers found in the same task twice.
 *
 * Invariants
 *   C1  pool->blocked is the number of workers counted out; each is also missing from
 *       the idle word's unparked count. Both change together, under idle.lock.
 *   C2  A spare slot is vacant exactly when no thread runs it; spares_live counts the
 *       others (under idle.lock); spares_running counts threads not yet exited, which
 *       shutdown waits for.
 *   C3  A shutting-down pool is not quiescent while any worker is counted out (park.c,
 *       quiescent_locked), and claims no spare once it has terminated.
 *   C4  A spare the system refuses (a thread limit: RLIMIT_NPROC, a container's
 *       pids.max) gives its slot back, and the pool claims no spare for the next
 *       SPINDLE_SPARE_RETRY_NS. Without the pause, the refusal's own look at the
 *       queues (park.c, S2) would claim the slot again at once, and the pool would retry for as
 *       long as its worker blocks, on every CPU. After it, the next submission or the
 *       monitor's next tick tries again (watch_pool: while a worker is counted out and
 *       work waits with nobody looking for it), so a worker that waits for the very
 *       work queued behind it gets a spare once the system allows one; meanwhile the
 *       work waits. The first refusal is said once, through the engine's log.
 *   MI1 The monitor sleeps only while every worker of every pool it watches is parked
 *       or retired (worker.c, W6), and none is counted out: asleep, it would not see a
 *       running worker's task block, nor try a counted-out worker's refused spare
 *       again (C4). Whatever makes a worker run again pokes it after the count that
 *       says so — a wake (park.c, wake_then_poke), a retired worker's return
 *       (worker.c, retire), a new pool (spindle_monitor_register) — and the monitor
 *       announces that it sleeps before its last look at those counts, so either the
 *       look sees the worker or the poke sees the announcement. A worker is counted
 *       out only while it runs, and moves between running and counted out under the
 *       idle lock, under which the look reads both counts: it is seen in one of them.
 *
 * Models: Tests/Models/counted_out.pml checks C1 over every interleaving of a worker
 * (explicit sections, unannounced blocking, parking) and the monitor;
 * Tests/Models/shutdown_spares.pml checks C2-C4 with a worker blocked on the work
 * queued behind it, a spare claimed, refused once, retried and retired, and a shutdown;
 * Tests/Models/monitor_idle.pml checks MI1 against wakes, a worker's retirement and
 * return, a worker counting itself out and back in, and a pool's registration.
 */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- counting out and in (C1) -------------------------------------------------------- */

/* Worker `w` (the caller) counts itself out, in spindle_blocking_begin. If the monitor
 * counted it out already, that count becomes this one: never twice (C1). */
static void count_out(spindle_pool *pool, spindle_worker *w) {
    spindle_idle *idle = &pool->idle;
    pthread_mutex_lock(&idle->lock);
    bool already = w->counted_out;
    w->counted_out = false;
    if (!already) {
        /* seq_cst: the accounting RMWs take part in park.c's Dekker argument. */
        atomic_fetch_sub_explicit(&idle->state, SPINDLE_UNPARKED_ONE, memory_order_seq_cst);
        pool->blocked++;
    }
    pthread_mutex_unlock(&idle->lock);
    if (already) return;
    /* Our RMW, a fence, then a look at the queues: a submitter that saw us counted in
     * (and so woke nobody) published its work before its own fence and look. */
    atomic_thread_fence(memory_order_seq_cst);
    if (spindle_pool_has_pending_work(pool)) spindle_wake_one(pool, false);
}

/* Worker `w` (the caller) leaves its outermost blocking section and counts itself in.
 * Its depth goes back to 0 under the lock, with the count: stored before the lock, a
 * monitor between the two would find a worker with no depth and no flag, still counted
 * out by itself, and count it out a second time (Tests/Models/counted_out.pml). */
static void count_in(spindle_pool *pool, spindle_worker *w) {
    spindle_idle *idle = &pool->idle;
    pthread_mutex_lock(&idle->lock);
    /* Relaxed: the monitor reads it under this lock. */
    atomic_store_explicit(&w->blocking_depth, 0, memory_order_relaxed);
    atomic_fetch_add_explicit(&idle->state, SPINDLE_UNPARKED_ONE, memory_order_seq_cst);
    pool->blocked--;
    pthread_mutex_unlock(&idle->lock);
}

/* The monitor's counting of worker `w`, through `w->counted_out` (C1): out once, not
 * while the worker counts itself out (its depth, stored before it takes this lock, is
 * read under it) or is parked, and in only if the worker has not parked meanwhile
 * (spindle_idle_sleep counts it in then). */
static void monitor_count_out(spindle_pool *pool, spindle_worker *w) {
    spindle_idle *idle = &pool->idle;
    pthread_mutex_lock(&idle->lock);
    /* Not a worker parked in the idle protocol (a join wait parks inside a task): its
     * parking already counted it out. */
    bool now = !w->counted_out && !w->in_sleepers &&
               atomic_load_explicit(&w->blocking_depth, memory_order_relaxed) == 0;
    if (now) {
        w->counted_out = true;
        atomic_fetch_sub_explicit(&idle->state, SPINDLE_UNPARKED_ONE, memory_order_seq_cst);
        pool->blocked++;
    }
    pthread_mutex_unlock(&idle->lock);
    if (!now) return;
    /* As in count_out. */
    atomic_thread_fence(memory_order_seq_cst);
    if (spindle_pool_has_pending_work(pool)) spindle_wake_one(pool, false);
}

static void monitor_count_in(spindle_pool *pool, spindle_worker *w) {
    spindle_idle *idle = &pool->idle;
    pthread_mutex_lock(&idle->lock);
    if (w->counted_out) {
        w->counted_out = false;
        atomic_fetch_add_explicit(&idle->state, SPINDLE_UNPARKED_ONE, memory_order_seq_cst);
        pool->blocked--;
    }
    pthread_mutex_unlock(&idle->lock);
}

bool spindle_uncount_parking_locked(spindle_pool *pool, spindle_worker *w) {
    if (!w->counted_out) return false;
    w->counted_out = false;
    pool->blocked--;
    return true;
}

void spindle_blocking_begin(void) {
    spindle_worker *w = spindle_tls_worker;
    if (!w) return;
    /* Owner-written; relaxed: the monitor reads it as a hint (see the top). */
    uint32_t depth = atomic_load_explicit(&w->blocking_depth, memory_order_relaxed);
    atomic_store_explicit(&w->blocking_depth, depth + 1, memory_order_relaxed);
    if (depth == 0) count_out(w->pool, w);
}

void spindle_blocking_end(void) {
    spindle_worker *w = spindle_tls_worker;
    if (!w) return;
    uint32_t depth = atomic_load_explicit(&w->blocking_depth, memory_order_relaxed);
    if (depth == 1) {
        count_in(w->pool, w); /* stores 0 under the lock */
        return;
    }
    atomic_store_explicit(&w->blocking_depth, depth - 1, memory_order_relaxed);
}

/* ---- spares (C2) -------------------------------------------------------------------- */

spindle_worker *spindle_claim_spare_locked(spindle_pool *pool) {
    if (pool->blocked == 0 || pool->spares_live >= pool->max_spares) return NULL;
    /* C4: not while the system has just refused one. */
    if (pool->spare_retry_at != 0 && spindle_now_ns() < pool->spare_retry_at) return NULL;
    /* C3. Relaxed: `terminated` is written under this lock. */
    if (atomic_load_explicit(&pool->terminated, memory_order_relaxed)) return NULL;
    /* Relaxed: slots are added under this lock. */
    uint32_t nslots = atomic_load_explicit(&pool->nslots, memory_order_relaxed);
    spindle_worker *w = NULL;
    for (uint32_t i = pool->nworkers; i < nslots && !w; i++)
        if (pool->workers[i]->vacant) w = pool->workers[i];
    if (!w) {
        if (nslots >= pool->nworkers + pool->max_spares) return NULL;
        w = spindle_create_spare_worker(pool, nslots);
        if (!w) return NULL;
        pool->workers[nslots] = w;
        /* Release: the monitor and notify_all read the slot after an acquire load. */
        atomic_store_explicit(&pool->nslots, nslots + 1, memory_order_release);
    }
    w->vacant = false;
    w->in_sleepers = false;
    w->searching = true; /* accounted below: it starts as a searcher, like a woken worker */
    w->guest = false;
    pool->spares_live++;
    atomic_fetch_add_explicit(&pool->spares_running, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&pool->idle.state, SPINDLE_SEARCHING_ONE | SPINDLE_UNPARKED_ONE,
                              memory_order_seq_cst);
    return w;
}

void spindle_start_spare(spindle_pool *pool, spindle_worker *w) {
    if (spindle_spawn_spare(pool, w) != 0) spindle_spare_start_failed(pool, w);
}

void spindle_spare_start_failed(spindle_pool *pool, spindle_worker *w) {
    spindle_idle *idle = &pool->idle;
    pthread_mutex_lock(&idle->lock);
    w->vacant = true;
    pool->spares_live--;
    /* C4. */
    pool->spare_retry_at = spindle_now_ns() + SPINDLE_SPARE_RETRY_NS;
    bool say = !pool->spare_refusal_said;
    pool->spare_refusal_said = true;
    uint64_t prev = atomic_fetch_sub_explicit(&idle->state, SPINDLE_SEARCHING_ONE | SPINDLE_UNPARKED_ONE,
                                              memory_order_seq_cst);
    pthread_mutex_unlock(&idle->lock);
    if (say)
        spindle_log(SPINDLE_LOG_WARNING,
                    "pool %s: the system refused a spare worker's thread (a thread limit?); work waits for "
                    "blocked workers to return, and spares are tried again every %d ms",
                    pool->name, (int)(SPINDLE_SPARE_RETRY_NS / 1000000));
    /* It was counted a searcher: if it was the last, look at the queues for it (S2). */
    if (SPINDLE_SEARCHING(prev) == 1) {
        atomic_thread_fence(memory_order_seq_cst);
        if (spindle_pool_has_pending_work(pool)) spindle_notify_one(pool);
    }
    /* Shutdown step 4: it was counted unparked, so a worker that parked since could not
     * find the pool quiescent, and no other is left to look. Wake them all to look
     * again, as a refused submitter does. seq_cst, after the RMW above: if this reads
     * 0, the shutdown's CAS comes later, and its own wake-up follows. */
    if (atomic_load_explicit(&pool->shutdown, memory_order_seq_cst) != 0) spindle_notify_all(pool);
    /* Release pairs with shutdown's acquire: the pool outlives every started spare. */
    atomic_fetch_sub_explicit(&pool->spares_running, 1, memory_order_release);
    spindle_futex_wake(&pool->spares_running, INT_MAX);
}

void spindle_retire_spare_locked(spindle_pool *pool, spindle_worker *w) {
    spindle_idle *idle = &pool->idle;
    for (uint32_t k = 0; k < idle->nsleepers; k++) {
        if (idle->sleepers[k] == w->index) {
            idle->sleepers[k] = idle->sleepers[--idle->nsleepers];
            break;
        }
    }
    /* Already counted parked (it parked before it timed out): no accounting left. */
    w->in_sleepers = false;
    w->vacant = true;
    pool->spares_live--;
}

uint32_t spindle_pool_spare_count(const spindle_pool *pool) {
    spindle_pool *p = (spindle_pool *)pool;
    pthread_mutex_lock(&p->idle.lock);
    uint32_t n = p->spares_live;
    pthread_mutex_unlock(&p->idle.lock);
    return n;
}

/* ---- the monitor ---------------------------------------------------------------------- */

#define MONITOR_TICK_SUSPECT_NS 1000000ull /* 1 ms while a worker sits in one task */
#define MONITOR_TICK_NS 10000000ull        /* 10 ms while pools run */

/* All under `mon_lock`, except `mon_idle` (the futex word the monitor sleeps on). */
static pthread_mutex_t mon_lock = PTHREAD_MUTEX_INITIALIZER;
static spindle_pool *mon_pools;
static bool mon_running, mon_atfork;
static _Atomic uint32_t mon_idle;

/* CPU time of thread `tid` of this process, in ns; 0 if it cannot be read (it exited).
 * The kernel's per-thread CPU clock id, as glibc's pthread_getcpuclockid makes it
 * (CPUCLOCK_SCHED | CPUCLOCK_PERTHREAD_MASK), from the kernel id: the monitor has no
 * pthread_t for a spare that may be exiting. */
static uint64_t thread_cpu_ns(int32_t tid) {
    clockid_t id = (clockid_t)((~(unsigned)tid << 3) | 6u);
    struct timespec ts;
    if (clock_gettime(id, &ts) != 0) return 0;
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Whether thread `tid` of this process is asleep in the kernel (state S or D in
 * /proc/self/task/TID/stat), not runnable. Asked only of a worker that used little CPU
 * in one task across a tick: on a loaded machine a runnable worker the scheduler keeps
 * off its CPU uses little too, and counting it out would only add threads to a machine
 * that has no CPU to spare. */
static bool thread_sleeps(int32_t tid) {
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/self/task/%d/stat", (int)tid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return false;
    buf[n] = 0;
    /* "pid (comm) S ...": comm may hold spaces and parentheses; the state follows the
     * last ')'. */
    char *paren = strrchr(buf, ')');
    if (!paren || paren[1] != ' ') return false;
    char state = paren[2];
    return state == 'S' || state == 'D';
}

/* Whether `pool` has a worker for the monitor to watch (MI1): one unparked and not
 * retired, or one counted out (C1), whose refused spare only the monitor tries again
 * (C4). Sets *counted_any when a worker is counted out.
 *
 * The unparked count and `blocked` are read together under the idle lock, where every
 * change to either is made. Read apart, a worker that counts itself out (unparked, then
 * counted out, in one locked section) or back in between the two reads is seen in
 * neither, and a monitor deciding whether to sleep would sleep while it runs or waits
 * (Tests/Models/monitor_idle.pml). `retired` changes outside the lock, and a retired
 * worker pokes the monitor once it counts itself back (MI1). */
static bool pool_has_watch(spindle_pool *pool, bool *counted_any) {
    /* A pool inherited through fork() has no threads here (pool.c). */
    if (pool->forked) return false;
    pthread_mutex_lock(&pool->idle.lock);
    /* seq_cst: the monitor's side of MI1's pairing with a waker's RMW (monitor_main). */
    uint64_t s = atomic_load_explicit(&pool->idle.state, memory_order_seq_cst);
    *counted_any = pool->blocked != 0;
    pthread_mutex_unlock(&pool->idle.lock);
    /* Retired workers (worker.c, W6) count as unparked but run nothing. seq_cst: the
     * monitor's side of the pairing with a retired worker's return, which decrements
     * `retired`, then pokes. */
    return *counted_any || SPINDLE_UNPARKED(s) > atomic_load_explicit(&pool->retired, memory_order_seq_cst);
}

/* One look at `pool`. Returns whether any worker runs (or is counted out); sets
 * *suspect when some worker is in the same task as at the last look. */
static bool watch_pool(spindle_pool *pool, uint64_t elapsed_ns, bool *suspect) {
    bool counted_any;
    if (!pool_has_watch(pool, &counted_any)) return false;
    /* Acquire pairs with the release that published each slot. */
    uint32_t nslots = atomic_load_explicit(&pool->nslots, memory_order_acquire);
    bool work = spindle_pool_has_pending_work(pool);
    for (uint32_t i = 0; i < nslots; i++) {
        spindle_worker *w = pool->workers[i];
        /* Relaxed: counters, read as values (worker.c's bump). */
        uint64_t executed = atomic_load_explicit(&w->counters.executed, memory_order_relaxed);
        uint64_t finished = atomic_load_explicit(&w->counters.finished, memory_order_relaxed);
        int32_t tid = atomic_load_explicit(&w->tid, memory_order_relaxed);
        bool same_task = executed != finished && executed == w->mon_executed && tid != 0;
        uint64_t cpu = same_task ? thread_cpu_ns(tid) : 0;
        bool blocked = same_task && cpu != 0 && w->mon_cpu_ns != 0 && cpu - w->mon_cpu_ns < elapsed_ns / 2 &&
                       atomic_load_explicit(&w->blocking_depth, memory_order_relaxed) == 0 &&
                       thread_sleeps(tid);
        if (same_task) *suspect = true;
        w->mon_executed = executed;
        w->mon_cpu_ns = cpu;
        /* Counted out while it stays blocked; counted out at first only if work waits
         * (a worker blocked with nothing queued costs the pool nothing yet). A racy
         * read of the flag, settled under the lock by the two functions. */
        if (blocked && work)
            monitor_count_out(pool, w);
        else if (!blocked)
            monitor_count_in(pool, w);
    }
    /* C4: work waiting while workers are counted out, and nobody looking for it. The
     * spare claimed for it was refused, and its worker may be waiting for that very
     * work, with no submission to come that would claim one again: try again now,
     * which the pause after the refusal turns into one try per pause. */
    if (counted_any && work) spindle_notify_one(pool);
    return true;
}

/* How often, at most, the monitor reads the CPU limit again (cgroup.c, CG6). */
#define CPU_LIMIT_INTERVAL_NS 1000000000ull

static void *monitor_main(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "spindle-monitor");
    uint64_t last = spindle_now_ns();
    /* The first look after a nap: work has just arrived (MI1). */
    bool woke = false;
    for (;;) {
        uint64_t now = spindle_now_ns();
        bool active = false, suspect = false;
        pthread_mutex_lock(&mon_lock);
        for (spindle_pool *p = mon_pools; p; p = p->monitor_next)
            active |= watch_pool(p, now - last, &suspect);
        pthread_mutex_unlock(&mon_lock);
        last = now;
        /* A container's CPU limit, re-read at most once a second (cgroup.c, CG6), outside
         * mon_lock, which the pools' registry never takes: while the pools are busy, and
         * as they go idle. Not on the look that follows a nap: that look comes as a
         * burst of work starts, usually on the CPU of the worker that woke the monitor,
         * and reading the limit is a dozen system calls on files (tens to hundreds of
         * microseconds) that the burst's first worker would wait for. Going idle, the
         * read costs the work nothing, and the next burst starts with the limit read. */
        if ((!active || !woke) && spindle_cpu_limit_refresh(CPU_LIMIT_INTERVAL_NS))
            spindle_pools_follow_cpu_limit();
        woke = false;
        if (!active) {
            /* Everyone is parked or retired, and nobody is counted out: sleep until a
             * worker runs again (MI1). Announce first, then look again (seq_cst, all
             * three): a worker woken or resumed either sees the announcement and pokes,
             * or did its count's RMW before our second look, which then sees it
             * running. The second look asks what the first asked: a worker counted out
             * since the first is watched. */
            spindle_seam_monitor_gate(); /* test seams (seams.c): nothing in release builds */
            atomic_store_explicit(&mon_idle, 1, memory_order_seq_cst);
            bool again = false, counted_any;
            pthread_mutex_lock(&mon_lock);
            for (spindle_pool *p = mon_pools; p && !again; p = p->monitor_next)
                again = pool_has_watch(p, &counted_any);
            pthread_mutex_unlock(&mon_lock);
            if (!again) {
                spindle_seam_count_monitor_nap(); /* test seams (seams.c): nothing in release builds */
                while (atomic_load_explicit(&mon_idle, memory_order_acquire) == 1)
                    spindle_futex_wait(&mon_idle, 1);
                spindle_seam_count_monitor_wake();
            }
            atomic_store_explicit(&mon_idle, 0, memory_order_relaxed);
            last = spindle_now_ns();
            woke = !again;
            continue;
        }
        uint64_t tick = suspect ? MONITOR_TICK_SUSPECT_NS : MONITOR_TICK_NS;
        struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)tick};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
    }
    return NULL;
}

void spindle_monitor_poke(void) {
    /* seq_cst: against the monitor's announcement (see monitor_main). */
    if (atomic_load_explicit(&mon_idle, memory_order_seq_cst) == 1 &&
        atomic_exchange_explicit(&mon_idle, 0, memory_order_seq_cst) == 1)
        spindle_futex_wake(&mon_idle, 1);
}

/* fork(): the child has no monitor thread, and the lock may have been held by a
 * thread that is not there. */
static void monitor_reset_in_child(void) {
    pthread_mutex_init(&mon_lock, NULL);
    mon_running = false;
    atomic_store_explicit(&mon_idle, 0, memory_order_relaxed);
}

void spindle_monitor_register(spindle_pool *pool) {
    if (pool->max_spares == 0) return;
    pthread_mutex_lock(&mon_lock);
    pool->monitor_next = mon_pools;
    mon_pools = pool;
    if (!mon_atfork && pthread_atfork(NULL, NULL, monitor_reset_in_child) == 0) mon_atfork = true;
    /* Started by the spawner, so that it runs at the process's own CPUs, nice and
     * policy, not those of the thread that made the first pool (spawn.c); with every
     * signal blocked, as the spawner's: a process that directs a signal to one thread
     * must not find it delivered here. A refusal (a thread limit) leaves the pools
     * without spares and without following a CPU limit; the next pool tries again. */
    if (!mon_running && spindle_spawn_service_thread(monitor_main) == 0) mon_running = true;
    pthread_mutex_unlock(&mon_lock);
    spindle_monitor_poke(); /* its workers start unparked */
}

void spindle_monitor_unregister(spindle_pool *pool) {
    if (pool->max_spares == 0) return;
    pthread_mutex_lock(&mon_lock);
    for (spindle_pool **p = &mon_pools; *p; p = &(*p)->monitor_next) {
        if (*p == pool) {
            *p = pool->monitor_next;
            break;
        }
    }
    pthread_mutex_unlock(&mon_lock);
}
