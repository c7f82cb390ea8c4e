/*
 * pool.c — creating, feeding and destroying a pool. The design essay lives here.
 *
 * Design
 * ======
 * Spindle runs CPU-bound work for Swift services whose event loops must not block. The
 * pool has one worker thread per CPU the process may run on (sched_getaffinity, so
 * `taskset` and cgroup cpusets are honoured) and the shape of the schedulers that do
 * this best: Cilk/rayon for fork-join, Go and tokio for the scheduling and sleeping.
 *
 * Queues. Every worker owns a Chase–Lev deque (deque.c). Work a worker spawns goes on
 * its own deque; it pops newest first (cache-hot, depth-first: bounded memory for
 * divide-and-conquer) and other workers steal oldest first (the biggest pieces, the
 * fewest steals). Work from threads outside the pool goes to one shared injector
 * (injector.c): a producer pays one atomic exchange, workers take it in batches.
 *
 * Fork-join. A join frame (join.c) lives on the joiner's stack and is pushed on its
 * deque; if nobody stole it by the time the joiner's own half is done, the joiner pops
 * it back and runs it inline — a push, a pop and two fences, no allocation, no wake-up.
 * A joiner whose frame was stolen keeps running other work until the thief finishes.
 *
 * Sleeping (park.c). Idle workers must cost nothing, but waking a parked thread costs
 * microseconds (the `latency` case in docs/performance.md), where a cache-line
 * hand-off between running cores costs tens of nanoseconds. So a worker that runs dry
 * first *searches* (steals, polls the injector) for up to 50 µs, then parks on its own
 * futex. At most half the workers search at once; a producer
 * wakes a sleeper only when nobody is searching; the last searcher to find work wakes
 * the next if more is pending. The Dekker-style argument that no wake-up is lost is
 * at the top of park.c. Which sleeper wakes: the last to park (warmest cache), except
 * that in a pool pinned one worker per CPU an outside submission wakes the worker on
 * the submitter's CPU, which preempts the submitter rather than waiting for an
 * interrupt to reach another vCPU (park.c, pick_sleeper_locked).
 *
 * Time slice. SCHED_OTHER workers ask for a 100 µs EEVDF slice (worker.c,
 * spindle_thread_request_slice) so that a woken worker preempts the thread that
 * submitted to it, which is often on the same CPU; a searching worker yields the
 * CPU every 16 rounds, so that having preempted its submitter it does not keep it off
 * the CPU while it searches. A worker that outranks its submitter would keep the CPU
 * through those yields, so it does not search there at all (park.c, G1).
 *
 * Priority. Each worker sets its own nice and policy at start (worker.c). It is
 * started not by the pool's creator but by the process's spawner thread (spawn.c),
 * which runs at the process's own priority: a thread inherits its creator's, and one
 * that has given priority up cannot take it back, so a pool created from inside a
 * background worker would otherwise run at background priority.
 *
 * The Swift layer's queues lock with mutex.c (spin briefly, then futex), not with
 * Synchronization.Mutex, whose priority-inheritance futex put contended waiters to
 * sleep in the kernel at once.
 *
 * Placement (topology_plan.c). Workers are spread over NUMA nodes in proportion to their
 * usable CPUs, restricted to their node's CPUs (or one CPU each), with their deque on
 * their node; a thief tries its SMT sibling, then its L3, then its node, then other
 * nodes by distance, taking a small batch when it crosses nodes.
 *
 * Rejected alternatives
 *   - One shared queue with a mutex (Foundation's OperationQueue, a plain pthread
 *     pool): every task touches the same lock and cache line; fork-join degenerates.
 *   - A condition variable per pool instead of per-worker futexes: broadcast wakes a
 *     herd; signal cannot target the worker whose join frame was finished.
 *   - Growable deques: need safe memory reclamation; see deque.c.
 *   - Spinning without a bound (busy pools): burns the CPU the service's event loop
 *     needs; an idle pool must burn under 1 ms of CPU per second.
 *
 * Shutdown protocol
 * =================
 *   1. spindle_pool_destroy refuses to run on one of the pool's own workers (EDEADLK):
 *      step 5 would wait for the calling thread itself.
 *   2. It sets `shutdown` (1 drain, 2 cancel) with a seq_cst CAS. A second caller loses
 *      the CAS and goes to step 6 instead.
 *   3. Outside submitters in flight are counted by the injector's `len` (injector.c,
 *      J3): a submitter reserves its place there (a seq_cst RMW) *before* it reads
 *      `shutdown` (seq_cst), and links its task after. By the seq_cst total order,
 *      either the submitter sees the flag and backs out with ESHUTDOWN (taking its
 *      reservation back; its task is still its own), or every worker that reads the
 *      flag set reads `len` at or after the reservation, and cannot take the pool for
 *      quiescent until that task has been popped. Shutdown itself does not wait for
 *      them: the quiescence check in step 4 does. Workers may still spawn: work in
 *      flight must be able to finish (and a join must be able to fork) — in CANCEL
 *      mode what they spawn, and what a submitter that passed its check links late,
 *      is cancelled when dequeued. Tests/Models/submit_shutdown.pml checks steps 3
 *      and 4 with Spin over every interleaving of two submitters and two workers.
 *   4. It wakes every worker. Workers keep running (DRAIN) or cancelling (CANCEL) what
 *      they find. A worker that finds nothing parks; under the idle lock, the parking
 *      worker checks for quiescence: shutting down, the injector's `len` at 0 (no
 *      outside submitter in flight, step 3; a refused submitter that was counted for a
 *      moment and takes `len` back to 0 wakes the workers to check again), every
 *      worker parked outside any task (so none can spawn; a spare whose thread the
 *      system refuses was counted running, and wakes them too: spare.c, C4), and
 *      every queue empty. The first to see it sets `terminated` and wakes everyone;
 *      workers exit when they see `terminated`.
 *      Quiescence is stable: only running tasks or outside submitters create work, and
 *      there are none. Nothing is lost: each queued task was run or cancelled before
 *      the queues could read empty.
 *   5. It joins every worker thread and marks the pool `joined` and `stopped`. The
 *      memory stays until spindle_pool_free, so that a thread racing with shutdown
 *      still gets a clean ESHUTDOWN from a live struct rather than a use-after-free; the
 *      Swift ThreadPool frees it in deinit, when no reference (so no caller) is left.
 *   6. A caller that lost step 2's CAS escalates, if it asks for CANCEL while the pool
 *      drains (CAS 1 -> 2: a drain that cannot finish, say a task that keeps
 *      resubmitting itself, is taken over; every task dequeued from then on is
 *      cancelled), and then waits for `stopped`: every caller returns only once the
 *      pool has stopped. Escalation needs no wake-up: a worker reads the mode for each
 *      task it runs, and sleeping workers have nothing to cancel.
 *   Tests/Models/shutdown.pml checks steps 2 and 4-6 with Spin, over every interleaving
 *   of two workers, a task that blocks until the child it spawns has run, an outside
 *   submitter and two callers; Tests/Models/shutdown_spares.pml does the same with a
 *   spare standing in for the blocked worker (step 5's wait for spares included).
 */
#include "internal.h"

#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void spindle_config_init(spindle_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->nice = SPINDLE_NICE_INHERIT;
    cfg->max_spares = SPINDLE_DEFAULT_MAX_SPARES;
}

uint32_t spindle_usable_cpu_count(void) {
    cpu_set_t *set = spindle_creator_affinity();
    if (set) {
        int n = CPU_COUNT_S(CPU_ALLOC_SIZE(SPINDLE_MAX_CPUS), set);
        CPU_FREE(set);
        if (n > 0) return (uint32_t)n;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (uint32_t)n : 1;
}

/* Stops and frees a pool whose first `started` workers are running (create failed). */
static void abort_create(spindle_pool *pool, uint32_t started) {
    atomic_store_explicit(&pool->shutdown, 2, memory_order_seq_cst);
    atomic_store_explicit(&pool->terminated, true, memory_order_seq_cst);
    spindle_notify_all(pool);
    for (uint32_t i = 0; i < started; i++) pthread_join(pool->workers[i]->thread, NULL);
}

/* ---- node-local memory -------------------------------------------------------------- */

/* Memory on a node through libnuma (numa.c), for a pool created while the process sees
 * more than one node; numa_alloc_onnode rounds up to whole pages, which is fine for a
 * deque ring or a worker's block (one per worker, made once). */
static void *numa_alloc_on_node(size_t bytes, int32_t node, void *ctx) {
    (void)ctx;
    return spindle_numa_alloc(bytes, node);
}

static void numa_free_on_node(void *mem, size_t bytes, void *ctx) {
    (void)ctx;
    spindle_numa_free(mem, bytes);
}

/* One node, or no libnuma: the heap. */
static void *heap_alloc_on_node(size_t bytes, int32_t node, void *ctx) {
    (void)node;
    (void)ctx;
    return malloc(bytes);
}

static void heap_free_on_node(void *mem, size_t bytes, void *ctx) {
    (void)bytes;
    (void)ctx;
    free(mem);
}

typedef struct node_alloc {
    spindle_pool *pool;
    int32_t node;
} node_alloc;

static void *deque_alloc(size_t bytes, void *ctx) {
    node_alloc *na = ctx;
    return na->pool->alloc_on_node(bytes, na->node, na->pool->alloc_ctx);
}

static void deque_dealloc(void *mem, size_t bytes, void *ctx) {
    spindle_pool *pool = ctx;
    pool->free_on_node(mem, bytes, pool->alloc_ctx);
}

/* ---- a worker's own memory -----------------------------------------------------------
 *
 * Each worker is one block from its memory node (the plan's `mem_node`: its own node, or
 * the nearest node with memory when its own has none), through the same seam as the deque
 * rings: the deque's top and bottom, the parker, the counters, the owner-only scheduling
 * state and its own steal tiers. On a multi-node machine the lines the owner writes on
 * every task (bottom, the counters) then live on the node it runs on, and a thief from
 * another node pays the remote access, not the owner.
 *
 * What the workers share is read-only after creation and stays with the pool: the
 * workers in steal order, the tiers to other nodes and the pin lists (in the pool's
 * plan). Read-only lines are copied into every cache that reads them, so they cost no
 * interconnect traffic after the first read, wherever they were allocated.
 *
 * Rejected: one array of all workers allocated by the creating thread: first touch
 * would put every worker's hot lines on the creator's node. Also rejected:
 * first touch from the worker thread itself (allocate in spindle_worker_main): the pool
 * must know every worker's address before any of them runs (thieves index `ordered[]`
 * from their first search), and a failed allocation there could not fail the create.
 *
 * The seam returns memory of unknown alignment (malloc: 16 bytes; numa_alloc_onnode:
 * a page); the struct needs SPINDLE_CACHELINE, so the block is over-allocated by that
 * much and the struct placed at the first aligned address in it. */

/* Allocates, zeroes and fills worker `i`'s block: placement from the pool's plan, or a
 * flat layout (steal from every regular worker, one tier, no node, unpinned) when it
 * has none, and for spares. */
static spindle_worker *create_worker(spindle_pool *pool, bool planned, uint32_t i) {
    uint32_t n = pool->nworkers;
    const spindle_plan *plan = planned ? pool->plan : NULL;
    int32_t mem_node = plan ? spindle_plan_worker_memory_node(plan, i) : -1;
    size_t bytes = SPINDLE_CACHELINE + sizeof(spindle_worker);
    char *block = pool->alloc_on_node(bytes, mem_node, pool->alloc_ctx);
    if (!block) return NULL;
    size_t skip = (SPINDLE_CACHELINE - (uintptr_t)block % SPINDLE_CACHELINE) % SPINDLE_CACHELINE;
    spindle_worker *w = (spindle_worker *)(void *)(block + skip);
    memset(w, 0, sizeof *w);
    w->waker_cpu = -1;
    w->pusher_cpu = -1;
    atomic_init(&w->cpu_hint, -1);
    w->block = block;
    w->block_bytes = bytes;
    w->mem_node = mem_node;
    if (!plan) {
        w->node = -1;
        /* Positions are indices here (`ordered` is `workers`, or the plan's order, which
         * holds every regular worker): all of them but itself, if it is one. */
        spindle_tier all = i < n ? (spindle_tier){0, n, i, i + 1} : (spindle_tier){0, n, 0, 0};
        if (spindle_tier_size(all)) w->local[w->nlocal++] = all;
        return w;
    }
    w->node = spindle_plan_worker_node(plan, i);
    w->nlocal = spindle_plan_local_tiers(plan, i, w->local);
    w->remote = spindle_plan_remote_tiers(plan, i, &w->nremote);
    w->pin = spindle_plan_pin_list(plan, i, &w->npin);
    return w;
}

/* True when every regular worker is pinned to a CPU that no other worker is pinned to. */
static bool pinned_one_per_cpu(const spindle_pool *pool) {
    uint64_t taken[SPINDLE_MAX_CPUS / 64] = {0};
    for (uint32_t i = 0; i < pool->nworkers; i++) {
        const spindle_worker *w = pool->workers[i];
        if (w->npin != 1 || w->pin[0] < 0 || w->pin[0] >= SPINDLE_MAX_CPUS) return false;
        uint32_t c = (uint32_t)w->pin[0];
        if (taken[c / 64] >> (c % 64) & 1) return false;
        taken[c / 64] |= 1ull << (c % 64);
    }
    return true;
}

/* The registry of pools, for fork() (below). */
static void registry_add(spindle_pool *pool);
static void registry_remove(spindle_pool *pool);

/* A spare's deque only ever holds what poll_injector hands it one at a time (spare.c). */
#define SPARE_DEQUE_CAPACITY 4u

spindle_worker *spindle_create_spare_worker(spindle_pool *pool, uint32_t index) {
    spindle_worker *w = create_worker(pool, false, index);
    node_alloc na = {pool, -1};
    if (!w) return NULL;
    if (spindle_deque_init(&w->deque, SPARE_DEQUE_CAPACITY, deque_alloc, &na) != 0) {
        pool->free_on_node(w->block, w->block_bytes, pool->alloc_ctx);
        return NULL;
    }
    w->pool = pool;
    w->index = index;
    w->spare = true;
    w->vacant = true;
    w->rng = 0x9E3779B97F4A7C15ull * (index + 1) ^ (uint64_t)(uintptr_t)pool;
    if (!w->rng) w->rng = 1;
    atomic_init(&w->parker.state, 0);
    return w;
}

/* Frees the workers created so far, spares included (each one's deque ring first: the
 * pointer to it is in the block), the idle state and the pool. */
static void free_pool(spindle_pool *pool) {
    /* Off the monitor's list before out of the registry (spindle_pool_create). */
    spindle_monitor_unregister(pool);
    registry_remove(pool);
    uint32_t nslots = atomic_load_explicit(&pool->nslots, memory_order_acquire);
    for (uint32_t i = 0; i < nslots; i++) {
        spindle_worker *w = pool->workers[i];
        if (!w) continue;
        spindle_deque_free(&w->deque, deque_dealloc, pool);
        pool->free_on_node(w->block, w->block_bytes, pool->alloc_ctx);
    }
    spindle_idle_destroy(&pool->idle);
    if (pool->affinity) CPU_FREE(pool->affinity);
    if (pool->ordered != pool->workers) free(pool->ordered);
    free(pool->workers);
    spindle_plan_free(pool->plan);
    free(pool);
}

/* Creation, in four steps: the configuration checked (validate), the workers planned
 * (plan_pool), the pool and its workers made but not started (make_pool), then started
 * (start_pool). Each step returns 0 or an error; from make_pool on, everything made is
 * freed on failure by one path, free_pool, which copes with a pool made only in part. */

/* Step 1: `cfg` is the caller's configuration (or the defaults), checked. */
static int validate(const spindle_config *cfg_in, spindle_config *cfg) {
    if (cfg_in)
        *cfg = *cfg_in;
    else
        spindle_config_init(cfg);
    if (cfg->workers > SPINDLE_MAX_WORKERS || cfg->max_spares > SPINDLE_MAX_WORKERS) return EINVAL;
    uint32_t cap = cfg->deque_capacity ? cfg->deque_capacity : SPINDLE_DEFAULT_DEQUE_CAPACITY;
    if (cap > (1u << 24)) return EINVAL;
    if (cfg->nice != SPINDLE_NICE_INHERIT && (cfg->nice < -20 || cfg->nice > 19)) return EINVAL;
    if (cfg->policy < SPINDLE_POLICY_NORMAL || cfg->policy > SPINDLE_POLICY_IDLE) return EINVAL;
    if (cfg->pinning < SPINDLE_PIN_NODE || cfg->pinning > SPINDLE_PIN_NONE) return EINVAL;
    if ((cfg->alloc_on_node == NULL) != (cfg->free_on_node == NULL)) return EINVAL;
    return 0;
}

/* Where the workers go, as plan_pool decides it. */
typedef struct pool_plan {
    spindle_plan *plan; /* the pool's own (made here, or a copy of the caller's); NULL: flat */
    uint32_t workers;
    int unplanned;      /* why there is no plan, when one was to be made */
    uint32_t limited;   /* workers a container's CPU limit allows (0: no limit) */
} pool_plan;

/* Step 2: the plan and the worker count. Without a readable topology the pool still
 * works, flat and unpinned, and, if pinning was asked for, says why it is not pinned
 * (spindle_pool_pin_error). */
static int plan_pool(spindle_config *cfg, pool_plan *pp) {
    *pp = (pool_plan){0};
    /* A process-wide pool is planned and sized for the process's CPUs, not its
     * creator's (affinity.c, "Whose CPUs"). */
    bool was_planning_for_process = spindle_tls_planning_for_process;
    if (cfg->permanent) spindle_tls_planning_for_process = true;
    /* A container's CPU limit (cgroup.c, CG3, CG5): a pool that sets no count of its own
     * has no more workers taking work than the limit allows. A process-wide pool keeps a
     * worker per CPU and lets only that many take work, so that it can follow the limit
     * up and down while it runs (CG6, spindle_pool_set_active_workers); any other pool
     * is planned for that many. */
    pp->limited = cfg->workers || cfg->plan ? 0 : spindle_cpu_limit_workers();
    if (pp->limited && !cfg->permanent) cfg->workers = pp->limited;
    if (!cfg->plan) {
        spindle_topology *topo = NULL;
        pp->unplanned = spindle_topology_load(NULL, NULL, &topo);
        if (pp->unplanned == 0) {
            pp->unplanned =
                spindle_plan_create(topo, cfg->workers, (spindle_pinning)cfg->pinning, NULL, 0, &pp->plan);
            spindle_topology_free(topo);
        }
    }
    spindle_tls_planning_for_process = was_planning_for_process;
    const spindle_plan *plan = cfg->plan ? cfg->plan : pp->plan;
    pp->workers = plan ? spindle_plan_worker_count(plan)
                       : (cfg->workers ? cfg->workers : spindle_usable_cpu_count());
    if (cfg->plan && cfg->workers && cfg->workers != pp->workers) return EINVAL;
    /* The pool keeps its plan (its workers share its tiers and pin lists): a copy of the
     * caller's, which the caller may free once this returns. */
    if (cfg->plan && !(pp->plan = spindle_plan_clone(cfg->plan))) return ENOMEM;
    return 0;
}

/* Step 3, its settings: what the workers read, the allocator, the idle state. */
static int init_pool(spindle_pool *pool, const spindle_config *cfg, const pool_plan *pp) {
    uint32_t n = pp->workers;
    /* Pointers only: each worker is a block on its own node (create_worker). The
     * array is written here and read-only afterwards, so every CPU keeps a copy. */
    pool->workers = calloc((size_t)n + cfg->max_spares, sizeof *pool->workers);
    if (!pool->workers) return ENOMEM;
    pool->nworkers = n;
    pool->max_spares = cfg->max_spares;
    pool->spare_idle_ns = cfg->spare_idle_ns ? cfg->spare_idle_ns : SPINDLE_DEFAULT_SPARE_IDLE_NS;
    atomic_init(&pool->nslots, 0);
    atomic_init(&pool->spares_running, 0);
    pool->spin_ns = cfg->spin_ns ? cfg->spin_ns : SPINDLE_DEFAULT_SPIN_NS;
    pool->permanent = cfg->permanent;
    pool->requested_nice = cfg->nice;
    pool->requested_policy = cfg->policy;
    const char *name = cfg->name ? cfg->name : "spindle-w";
    /* At most 15 bytes, cut at a UTF-8 character boundary (pool is zeroed: terminated). */
    size_t name_len = strlen(name);
    if (name_len > sizeof pool->name - 1) {
        name_len = sizeof pool->name - 1;
        while (name_len > 0 && ((unsigned char)name[name_len] & 0xC0) == 0x80) name_len--;
    }
    memcpy(pool->name, name, name_len);
    spindle_injector_init(&pool->injector);
    atomic_init(&pool->shutdown, 0);
    atomic_init(&pool->terminated, false);
    atomic_init(&pool->ready, 0);
    atomic_init(&pool->active_limit, n);
    atomic_init(&pool->retired, 0);
    atomic_init(&pool->joined, false);
    atomic_init(&pool->stopped, 0);
    atomic_init(&pool->effective_nice, 0);
    atomic_init(&pool->nice_error, 0);
    atomic_init(&pool->effective_policy, 0);
    atomic_init(&pool->policy_error, 0);
    atomic_init(&pool->slice_error, 0);
    atomic_init(&pool->slice_not_asked, false);
    /* The default slice only for SCHED_OTHER pools: BATCH and IDLE workers are meant to
     * yield to everything else, not to preempt it. */
    pool->requested_slice_ns =
        cfg->slice_ns == SPINDLE_SLICE_KERNEL ? 0
        : cfg->slice_ns != 0                  ? cfg->slice_ns
        : cfg->policy == SPINDLE_POLICY_NORMAL ? SPINDLE_DEFAULT_SLICE_NS
                                               : 0;
    if (cfg->alloc_on_node) {
        pool->alloc_on_node = cfg->alloc_on_node;
        pool->free_on_node = cfg->free_on_node;
    } else if (spindle_numa_multinode()) { /* decided once per pool (numa.c, NU2) */
        pool->alloc_on_node = numa_alloc_on_node;
        pool->free_on_node = numa_free_on_node;
    } else {
        pool->alloc_on_node = heap_alloc_on_node;
        pool->free_on_node = heap_free_on_node;
    }
    pool->alloc_ctx = cfg->alloc_ctx;
    atomic_init(&pool->pin_error, pp->unplanned && cfg->pinning != SPINDLE_PIN_NONE ? pp->unplanned : 0);
    /* The CPUs it is planned for (affinity.c, "Whose CPUs"): its unpinned workers start
     * on them, and pools its workers create are planned for them. */
    pool->affinity = cfg->permanent ? spindle_process_affinity() : spindle_creator_affinity();
    return spindle_idle_init(&pool->idle, n, n + cfg->max_spares);
}

/* Step 3, its workers: each one's block and deque ring, and the steal order. */
static int make_workers(spindle_pool *pool, uint32_t deque_capacity) {
    uint32_t n = pool->nworkers;
    for (uint32_t i = 0; i < n; i++) {
        spindle_worker *w = pool->workers[i] = create_worker(pool, pool->plan != NULL, i);
        node_alloc na = {pool, w ? w->mem_node : -1};
        if (!w || spindle_deque_init(&w->deque, deque_capacity, deque_alloc, &na) != 0) {
            if (w) pool->free_on_node(w->block, w->block_bytes, pool->alloc_ctx); /* not counted yet */
            pool->workers[i] = NULL;
            return ENOMEM;
        }
        w->pool = pool;
        w->index = i;
        w->rng = 0x9E3779B97F4A7C15ull * (i + 1) ^ (uint64_t)(uintptr_t)pool;
        if (!w->rng) w->rng = 1;
        atomic_init(&w->parker.state, 0);
        /* Counted as it is made, so that free_pool frees exactly what was made. */
        atomic_store_explicit(&pool->nslots, i + 1, memory_order_relaxed);
    }
    /* The steal order (topology_plan.c, PL3): the plan's, or the workers by index. */
    if (!pool->plan) {
        pool->ordered = pool->workers;
    } else if ((pool->ordered = malloc(sizeof(spindle_worker *) * n))) {
        const uint32_t *order = spindle_plan_order(pool->plan);
        for (uint32_t p = 0; p < n; p++) pool->ordered[p] = pool->workers[order[p]];
    } else {
        return ENOMEM;
    }
    pool->deque_capacity = (uint32_t)(pool->workers[0]->deque.mask + 1);
    /* One worker per CPU, each on its own: outside submissions may then wake the worker
     * on the submitter's CPU (park.c, pick_sleeper_locked). */
    pool->pinned_per_cpu = pinned_one_per_cpu(pool);
    return 0;
}

/* Step 3: the pool, its plan (from here on freed with it) and its workers, not yet
 * started. On failure, nothing is left. */
static int make_pool(const spindle_config *cfg, const pool_plan *pp, spindle_pool **out) {
    spindle_pool *pool = aligned_alloc(SPINDLE_CACHELINE, (sizeof *pool + SPINDLE_CACHELINE - 1) /
                                                              SPINDLE_CACHELINE * SPINDLE_CACHELINE);
    if (!pool) {
        spindle_plan_free(pp->plan);
        return ENOMEM;
    }
    memset(pool, 0, sizeof *pool);
    pool->plan = pp->plan;
    int rc = init_pool(pool, cfg, pp);
    if (!rc) rc = make_workers(pool, cfg->deque_capacity ? cfg->deque_capacity : SPINDLE_DEFAULT_DEQUE_CAPACITY);
    if (rc) {
        free_pool(pool);
        return rc;
    }
    *out = pool;
    return 0;
}

/* Step 4: the workers, started by the process's spawner, not by this thread, so that
 * they begin at the process's own policy and nice rather than ours (spawn.c). Returns
 * once every worker has named itself and applied its nice, so that the nice report is
 * final, and has been given the pool's policy by this thread (worker.c, W7). On
 * failure the pool is stopped and freed. */
static int start_pool(spindle_pool *pool) {
    uint32_t started = 0;
    int rc = spindle_spawn_workers(pool, &started);
    if (rc) {
        abort_create(pool, started);
        free_pool(pool);
        return rc;
    }
    /* Acquire pairs with the workers' release. */
    for (;;) {
        uint32_t r = atomic_load_explicit(&pool->ready, memory_order_acquire);
        if (r == pool->nworkers) break;
        spindle_futex_wait(&pool->ready, r);
    }
    spindle_workers_take_policy(pool);
    return 0;
}

int spindle_pool_create(const spindle_config *cfg_in, spindle_pool **out) {
    if (!out) return EINVAL;
    *out = NULL;
    /* Before any pool exists, so before any dispatch reads its result (promote.c, PR4). */
    spindle_barrier_init();
    spindle_config cfg;
    int rc = validate(cfg_in, &cfg);
    if (rc) return rc;
    pool_plan pp;
    rc = plan_pool(&cfg, &pp);
    if (rc) {
        spindle_plan_free(pp.plan);
        return rc;
    }
    spindle_pool *pool;
    if ((rc = make_pool(&cfg, &pp, &pool)) || (rc = start_pool(pool))) return rc;
    /* The registry first, and out of it last (free_pool): every pool on the monitor's
     * list is one that a fork() marks as inherited (mark_pools_forked). A child that
     * forks while this thread stands between the two would otherwise have the monitor
     * it starts watch a pool with no threads, whose workers the copy shows unparked:
     * that monitor would never sleep (spare.c, MI1). */
    registry_add(pool);
    spindle_seam_registration_gate(pool); /* test seams (seams.c): nothing in release builds */
    spindle_monitor_register(pool);
    if (pp.limited && cfg.permanent) spindle_pool_set_active_workers(pool, pp.limited);
    *out = pool;
    return 0;
}

int spindle_pool_set_active_workers(spindle_pool *pool, uint32_t n) {
    if (!pool->permanent) return EPERM;
    if (n < 1) n = 1;
    if (n > pool->nworkers) n = pool->nworkers;
    /* seq_cst: a worker that reads the old limit at its safe point and retires, and a
     * raise that follows, are ordered by retire_seq (worker.c, W6). */
    uint32_t before = atomic_exchange_explicit(&pool->active_limit, n, memory_order_seq_cst);
    for (uint32_t i = before; i < n; i++) {
        spindle_worker *w = pool->workers[i];
        /* Release: after the new limit; the retired worker reads it after this. */
        atomic_fetch_add_explicit(&w->retire_seq, 1, memory_order_release);
        spindle_futex_wake(&w->retire_seq, 1);
    }
    /* Lowered: the workers above `n` retire at their next safe point; a parked one when
     * it is next woken, which wake_locked prefers not to do (park.c). */
    return 0;
}

uint32_t spindle_pool_active_workers(const spindle_pool *pool) {
    return atomic_load_explicit(&((spindle_pool *)pool)->active_limit, memory_order_relaxed);
}


int spindle_pool_shutdown(spindle_pool *pool, spindle_shutdown_mode mode) {
    if (!pool) return EINVAL;
    if (pool->permanent) return EPERM;
    /* Step 1. */
    if (spindle_tls_worker && spindle_tls_worker->pool == pool) return EDEADLK;
    /* Step 2. */
    int expected = 0;
    int want = mode == SPINDLE_SHUTDOWN_CANCEL ? 2 : 1;
    if (!atomic_compare_exchange_strong_explicit(&pool->shutdown, &expected, want,
                                                 memory_order_seq_cst, memory_order_seq_cst)) {
        /* Step 6. seq_cst, as step 2's CAS: workers' acquire loads of the mode see it. */
        if (want == 2 && expected == 1)
            atomic_compare_exchange_strong_explicit(&pool->shutdown, &expected, 2,
                                                    memory_order_seq_cst, memory_order_seq_cst);
        /* Acquire pairs with step 5's release: the pool has stopped when this returns. */
        while (atomic_load_explicit(&pool->stopped, memory_order_acquire) == 0)
            spindle_futex_wait(&pool->stopped, 0);
        return EALREADY;
    }
    /* Step 4 (step 3 needs nothing of this thread). */
    spindle_notify_all(pool);
    /* Step 5. */
    for (uint32_t i = 0; i < pool->nworkers; i++) pthread_join(pool->workers[i]->thread, NULL);
    /* Spares are detached: wait until each has stopped touching the pool (spare.c, C2).
     * Acquire pairs with their release decrements. */
    for (;;) {
        uint32_t live = atomic_load_explicit(&pool->spares_running, memory_order_acquire);
        if (live == 0) break;
        spindle_futex_wait(&pool->spares_running, live);
    }
    /* Release pairs with spindle_pool_free's acquire, and with step 6's waiters. */
    atomic_store_explicit(&pool->joined, true, memory_order_release);
    atomic_store_explicit(&pool->stopped, 1, memory_order_release);
    spindle_futex_wake(&pool->stopped, INT_MAX);
    return 0;
}

void spindle_pool_free(spindle_pool *pool) {
    if (!pool) return;
    if (!atomic_load_explicit(&pool->joined, memory_order_acquire)) {
        /* EALREADY: another thread's shutdown, which has now finished (step 6). */
        int rc = spindle_pool_shutdown(pool, SPINDLE_SHUTDOWN_DRAIN);
        if (rc != 0 && rc != EALREADY) {
            /* Misuse: freeing from one of its own workers. */
            spindle_log(SPINDLE_LOG_ERROR, "spindle_pool_free: called from one of the pool's own workers");
            abort();
        }
    }
    free_pool(pool);
}

int spindle_pool_destroy(spindle_pool *pool, spindle_shutdown_mode mode) {
    int rc = spindle_pool_shutdown(pool, mode);
    if (rc == 0) free_pool(pool);
    return rc;
}

/* ---- fork() ---------------------------------------------------------------------------
 *
 * A forked child has one thread: none of the pools that existed at fork() has a worker
 * there (or a spare, or the monitor, or the spawner). Work queued on such a pool would
 * never run, so in the child every one of them refuses submissions with ECHILD from the
 * start: the Swift façade then says so (ThreadPool.Error.createdBeforeFork), sends a
 * refused Swift job to the global executor, and makes new process-wide pools on first
 * use in the child. Restarting the old pools' workers in the child instead was
 * rejected: their queues hold the parent's tasks, which the child would run a second
 * time, and their locks may have been held by threads the child does not have.
 * Pools created in the child work as usual (spawn.c and spare.c reset their own state
 * for it). */
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static spindle_pool *registry;
static pthread_once_t registry_once = PTHREAD_ONCE_INIT;

static void mark_pools_forked(void) {
    /* The child's only thread, before anything else runs: no lock is needed (and the
     * registry's may have been held by a thread that is not here). */
    pthread_mutex_init(&registry_lock, NULL);
    for (spindle_pool *p = registry; p; p = p->registry_next) p->forked = true;
}

static void install_fork_handler(void) { pthread_atfork(NULL, NULL, mark_pools_forked); }

static void registry_add(spindle_pool *pool) {
    pthread_once(&registry_once, install_fork_handler);
    pthread_mutex_lock(&registry_lock);
    pool->registry_next = registry;
    registry = pool;
    pthread_mutex_unlock(&registry_lock);
}

static void registry_remove(spindle_pool *pool) {
    pthread_mutex_lock(&registry_lock);
    for (spindle_pool **p = &registry; *p; p = &(*p)->registry_next) {
        if (*p == pool) {
            *p = pool->registry_next;
            break;
        }
    }
    pthread_mutex_unlock(&registry_lock);
}

bool spindle_pool_is_forked(const spindle_pool *pool) { return pool->forked; }

int spindle_submit_task(spindle_pool *pool, spindle_task *task) {
    spindle_worker *w = spindle_tls_worker;
    if (w && w->pool == pool) {
        spindle_worker_push(w, task);
        return 0;
    }
    return spindle_submit_task_shared(pool, task);
}

int spindle_submit_task_shared(spindle_pool *pool, spindle_task *task) {
    /* A pool inherited through fork(): nobody would run the task (above). */
    if (__builtin_expect(pool->forked, 0)) return ECHILD;
    /* Shutdown step 3, submitter's side: the reservation (a seq_cst RMW of the
     * injector's `len`) comes before the seq_cst read of `shutdown`. */
    int64_t backlog = spindle_injector_reserve(&pool->injector, 1);
    if (__builtin_expect(atomic_load_explicit(&pool->shutdown, memory_order_seq_cst) != 0, 0)) {
        /* Refused. Our reservation was in `len` for a moment, and a worker checking for
         * quiescence (park.c) in that moment did not terminate; if we take `len` back
         * to 0, wake the workers so that one checks again. Only refused submissions pay
         * this; the memory is still valid (freed only by spindle_pool_free, when nobody
         * can call in). */
        if (spindle_injector_unreserve(&pool->injector, 1) == 0) spindle_notify_all(pool);
        return ESHUTDOWN;
    }
    spindle_injector_link(&pool->injector, task, task);
    spindle_notify_one_after_push(pool, backlog);
    return 0;
}

typedef struct fn_task {
    spindle_task task;
    void (*fn)(void *, spindle_run_reason);
    void *ctx;
} fn_task;

static void fn_task_run(spindle_task *t, spindle_run_reason reason) {
    fn_task *ft = (fn_task *)t;
    void (*fn)(void *, spindle_run_reason) = ft->fn;
    void *ctx = ft->ctx;
    spindle_task_free(ft);
    fn(ctx, reason);
}

int spindle_submit(spindle_pool *pool, void (*fn)(void *ctx, spindle_run_reason reason), void *ctx) {
    if (!fn) return EINVAL;
    fn_task *ft = spindle_task_alloc(sizeof *ft);
    if (!ft) return ENOMEM;
    ft->task.run = fn_task_run;
    ft->fn = fn;
    ft->ctx = ctx;
    int rc = spindle_submit_task(pool, &ft->task);
    if (rc) spindle_task_free(ft);
    return rc;
}

uint32_t spindle_pool_worker_count(const spindle_pool *pool) { return pool->nworkers; }

int spindle_pool_pin_error(const spindle_pool *pool) {
    return atomic_load_explicit(&((spindle_pool *)pool)->pin_error, memory_order_relaxed);
}

uint32_t spindle_pool_steal_tiers(const spindle_pool *pool, uint32_t w) {
    return w < pool->nworkers ? pool->workers[w]->nlocal + pool->workers[w]->nremote : 0;
}

int32_t spindle_pool_worker_node(const spindle_pool *pool, uint32_t w) {
    return w < pool->nworkers ? pool->workers[w]->node : -1;
}

int spindle_pool_current_worker(const spindle_pool *pool) {
    spindle_worker *w = spindle_tls_worker;
    return w && w->pool == pool ? (int)w->index : -1;
}

spindle_pool *spindle_current_pool(void) {
    spindle_worker *w = spindle_tls_worker;
    return w ? w->pool : NULL;
}

bool spindle_current_worker_has_waiting_work(void) {
    spindle_worker *w = spindle_tls_worker;
    if (!w) return false;
    /* Both reads are relaxed hints (see their definitions): a task that arrives just
     * after is found when the caller next returns to find_task. */
    return spindle_deque_len(&w->deque) > 0 || spindle_injector_maybe_nonempty(&w->pool->injector);
}

bool spindle_pool_is_idle(const spindle_pool *pool) {
    spindle_pool *p = (spindle_pool *)pool;
    if (atomic_load_explicit(&p->joined, memory_order_acquire)) return true;
    pthread_mutex_lock(&p->idle.lock);
    bool idle = p->idle.task_sleepers == 0 && p->blocked == 0;
    pthread_mutex_unlock(&p->idle.lock);
    if (!idle || spindle_pool_has_pending_work(p)) return false;
    /* No worker inside a task (worker.c counts tasks begun and returned; relaxed: a
     * snapshot). Searching workers do not count: they park within their spin. */
    uint32_t slots = atomic_load_explicit(&p->nslots, memory_order_acquire);
    for (uint32_t i = 0; i < slots; i++) {
        spindle_counters *c = &p->workers[i]->counters;
        if (atomic_load_explicit(&c->executed, memory_order_relaxed) !=
            atomic_load_explicit(&c->finished, memory_order_relaxed))
            return false;
    }
    return true;
}

bool spindle_pool_is_shutting_down(const spindle_pool *pool) {
    /* Relaxed: a report; the submit path does its own ordered check. */
    return atomic_load_explicit(&((spindle_pool *)pool)->shutdown, memory_order_relaxed) != 0;
}

void spindle_pools_follow_cpu_limit(void) {
    if (spindle_cpu_limit_from_env()) return;
    uint32_t limited = spindle_cpu_limit_workers();
    pthread_mutex_lock(&registry_lock);
    for (spindle_pool *p = registry; p; p = p->registry_next)
        if (p->permanent && !p->forked) spindle_pool_set_active_workers(p, limited ? limited : p->nworkers);
    pthread_mutex_unlock(&registry_lock);
}
