/*
 * spindle_testing.h — direct access to the engine's internal queues, for tests that
 * hammer them from many threads. Not part of the stable API.
 */
#ifndef SPINDLE_TESTING_H
#define SPINDLE_TESTING_H

#include "spindle.h"
#include "spindle_topology.h"

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/** How many tiers worker `w` steals in, and the node each worker lives on. */
uint32_t spindle_pool_steal_tiers(const spindle_pool *pool, uint32_t w);
int32_t spindle_pool_worker_node(const spindle_pool *pool, uint32_t w);

/** The bytes a plan holds, and the bytes a pool holds for its workers' placement and
 *  steal orders (their state blocks, the shared steal order, its plan): not the deque
 *  rings, whose size is the configured capacity. For tests that placement grows
 *  linearly with the workers. */
size_t spindle_test_plan_bytes(const spindle_plan *plan);
size_t spindle_test_pool_placement_bytes(const spindle_pool *pool);

/** While set, worker threads that start count their stacks as more than half used, so
 *  their join waits never steal (worker.c, W4). */
void spindle_test_set_deep_join_waits(bool deep);

/** While `bytes` is not 0, worker threads that start (spares included) count their
 *  stacks as deep once `bytes` of them are used, instead of half (W4), and record the
 *  most stack any of their join waits found used; the record starts again at 0. */
void spindle_test_set_join_wait_floor(size_t bytes);
/** The most stack, in bytes, that a join wait on a thread started under
 *  spindle_test_set_join_wait_floor found used when it began to wait. */
size_t spindle_test_deepest_join_wait(void);

/** While not 0, a join's setter that must wake a worker parked on the latch sleeps this
 *  long between setting the latch and waking it, so that tests can reach the waiter's
 *  other ways out of the wait (join.c, L2). */
void spindle_test_set_latch_wake_delay_ns(uint64_t ns);
/** The pool's count of workers parked inside a join wait (its idle accounting). */
uint32_t spindle_test_pool_task_sleepers(spindle_pool *pool);

/** Restricts every regular worker of `pool` to `cpu` (-1: back to what its plan
 *  allows), as the kernel's placement might leave them all on one CPU. 0, or an errno. */
int spindle_test_confine_workers(spindle_pool *pool, int cpu);
/** How many times a worker of `pool` has moved itself off its pusher's CPU (park.c, G2). */
uint32_t spindle_test_pool_spreads(spindle_pool *pool);

/** Sends `message` through the engine's diagnostics (log.c), as the engine would. */
void spindle_test_log(spindle_log_level level, const char *message);

typedef struct spindle_test_deque spindle_test_deque;

/** A deque with `capacity` slots (rounded up to a power of two, >= 4) whose overflow
 *  goes to a private injector. NULL on allocation failure. */
spindle_test_deque *spindle_test_deque_create(uint32_t capacity);
void spindle_test_deque_destroy(spindle_test_deque *d);
/** Owner side. Returns how many tasks the push moved to the overflow injector. */
uint32_t spindle_test_deque_push(spindle_test_deque *d, spindle_task *t);
spindle_task *spindle_test_deque_pop(spindle_test_deque *d);
/** Thief side: 0 empty, 1 ok (*out set), 2 lost a race (retry). */
int spindle_test_deque_steal(spindle_test_deque *d, spindle_task **out);
/** Any thread: pops up to `max` tasks from the overflow injector. */
uint32_t spindle_test_deque_pop_overflow(spindle_test_deque *d, spindle_task **out, uint32_t max);
uint32_t spindle_test_deque_capacity(const spindle_test_deque *d);

/** Adds `delta` to the pool's count of searching workers, as if that many searchers
 *  existed and were not running (park.c, B1). Tests only: restore it before shutdown. */
void spindle_test_add_phantom_searchers(spindle_pool *pool, int32_t delta);
/** The injector backlog from which an outside submission wakes a sleeper regardless
 *  of searchers (SPINDLE_BACKLOG_WAKE). */
uint32_t spindle_test_backlog_wake(void);

/** Where worker `w`'s memory is: its state (the worker struct, `*state_bytes` long) and
 *  its deque ring (`*ring_bytes`), so that tests can check them against the allocations
 *  the node seam saw. NULLs and zeros for a worker index out of range. */
void spindle_test_worker_memory(const spindle_pool *pool, uint32_t w, const void **state,
                                size_t *state_bytes, const void **ring, size_t *ring_bytes);

/** Forks; the child creates a two-worker pool, runs 100 tasks on it, destroys it and
 *  exits. Returns the child's exit status (0: all ran), 2 if it did not finish within
 *  `timeout_ms` (it is then killed: a pool whose workers never start), 128 + signal if
 *  it died, or -errno if fork failed. For spawn.c's fork handling. */
int spindle_test_pool_in_forked_child(uint32_t timeout_ms);

/** Forks; in the child, a thread at nice +3 under SCHED_BATCH and pinned to one CPU makes
 *  the child's first pool, which starts the monitor. Returns 0 when the monitor runs at
 *  the child's own nice, policy and CPUs; 10, 11 or 12 when its nice, policy or CPU mask
 *  is the creator's instead; 14 when only its nice is, in a process without the
 *  privilege to lower a nice value, and the pool reports that (15 when it does not);
 *  13 when no monitor thread appeared; 2, 128 + signal or -errno as
 *  spindle_test_pool_in_forked_child. */
int spindle_test_monitor_baseline_in_forked_child(uint32_t timeout_ms);

/** Forks; in the child, a process-wide kind of pool of two workers lowers its active
 *  limit to one, so that worker 1 retires (W6) and worker 0 parks, and the monitor goes
 *  to sleep with nothing to watch. Then the limit rises, and nothing else happens: the
 *  monitor must wake, since worker 1 runs again (MI1). Returns 0 when it does, another
 *  code naming the step that did not (see testing.c), 2 on timeout, 128 + signal, or
 *  -errno. */
int spindle_test_resumed_worker_wakes_monitor_in_forked_child(uint32_t timeout_ms);

/** Both workers of a new two-worker pool run tasks that stay awake until told, and the
 *  calling thread, outside the pool, forks and joins a frame, which waits in the
 *  injector behind them. With every worker awake, the join's wait must end its spin at
 *  once and sleep (join.c, L3); a helper thread lets the tasks return once the wait has
 *  said so, or after 60 s. Returns 0 when the wait said so, 54 when it spun on, another
 *  code naming the step that failed (see testing.c). */
int spindle_test_outside_join_sleeps_when_pool_awake(void);

/** Looks libnuma up again under `soname` (NULL: the real name, libnuma.so.1), as if the
 *  process had started with that library; returns whether NUMA is then usable. Lets a
 *  test see how Spindle behaves on a machine without libnuma. */
int spindle_test_numa_reload(const char *soname);

/** From now on, a pool's creation starts at most `limit` workers; starting more fails
 *  with EAGAIN, as under a thread limit. -1 lifts the limit. Tests only. */
void spindle_test_limit_threads(int32_t limit);

/** While held, a worker of `pool` (spares included) that takes a task waits before
 *  running it, outside the task as the monitor sees it, until the hold is lifted. It
 *  stands for "every worker is busy" without needing the workers to get a CPU. A task a
 *  worker was already running when the hold began runs on. Lift the hold before the
 *  pool shuts down. Tests only. */
void spindle_test_hold_pool(spindle_pool *pool, bool hold);

/** Kinds of thread for spindle_test_refused_thread_in_forked_child. */
enum { SPINDLE_TEST_REFUSE_SPARE = 1, SPINDLE_TEST_REFUSE_SPAWNER = 2, SPINDLE_TEST_REFUSE_MONITOR = 4 };

/** Forks; in the child, a fresh process, every creation of a thread of `kind` fails
 *  with EAGAIN, as under a thread limit. For the spawner: pool creation must fail with
 *  EAGAIN and leave no thread, and succeed once threads are allowed again. For the
 *  monitor: a one-worker pool whose task blocks (saying so) still gets a spare that runs
 *  the next task. For a spare: that next task runs once the blocked one returns. In
 *  each, every task runs. Returns 0 when all of that holds, another code naming the
 *  step that did not (see testing.c), 2 on timeout, 128 + signal, or -errno. */
int spindle_test_refused_thread_in_forked_child(int kind, uint32_t timeout_ms);

/** Forks; in the child, a one-worker pool runs a task that blocks (saying so) until the
 *  next task has run, however long that takes, while the system refuses spare threads.
 *  Once the first refusal is seen, threads are allowed again: a spare must then start
 *  and run the next task while the first still blocks, with no other submission to
 *  prompt it. Returns 0 when it does, another code naming the step that did not (see
 *  testing.c), 2 on timeout, 128 + signal, or -errno. */
int spindle_test_spare_allowed_again_in_forked_child(uint32_t timeout_ms);

/** The same, with the monitor held from its look that finds the idle pool with nothing
 *  to watch until the first task has blocked and its spare has been refused: the look
 *  the monitor takes before it sleeps must see the worker counted out, or nothing tries
 *  the spare again and the next task waits for the first. Returns as
 *  spindle_test_spare_allowed_again_in_forked_child, or 37 when the monitor never
 *  reached its gate. */
int spindle_test_spare_allowed_again_between_monitor_looks_in_forked_child(uint32_t timeout_ms);

/** Forks; in the child, a thread creates a pool and is held between the pool's entry in
 *  the registry of pools and its entry in the monitor's list, while the pool's worker
 *  runs a task; the child then forks again. In that grandchild, where the copied pool
 *  has no threads, the monitor started with a pool of the grandchild's own must go to
 *  sleep once that pool is idle, and the copied pool must refuse work with ECHILD.
 *  Returns 0 when both hold, another code naming the step that did not (see
 *  testing.c: 68, the monitor never slept), 2 on timeout, 128 + signal, or -errno. */
int spindle_test_pool_half_registered_at_fork(uint32_t timeout_ms);

/** Forks; in the child, a one-worker pool whose task blocks (saying so) claims a spare,
 *  which the system refuses only after the pool has begun to shut down, its worker has
 *  run everything and parked. The shutdown must still finish, and every task run.
 *  Returns 0 when it does, another code naming the step that did not (see testing.c),
 *  2 on timeout, 128 + signal, or -errno. */
int spindle_test_spare_refused_during_shutdown_in_forked_child(uint32_t timeout_ms);

/** Restricts the calling thread to `cpu`; returns 0 or an errno. */
int spindle_test_pin_self(int cpu);
/** The CPU the calling thread runs on (sched_getcpu). */
int spindle_test_current_cpu(void);
/** One spin-wait hint (the pause instruction): for tests that need a busy delay. */
void spindle_test_relax(void);

/** The task-node cache (nodes.c): how many nodes the calling thread's heap holds on its
 *  local list, and how many blocks all threads have taken (carved from a slab or
 *  malloc'ed) and given back to malloc so far. Any pointer may be NULL. */
void spindle_test_task_cache(uint32_t *local, uint64_t *malloced, uint64_t *freed);
/** Gives the calling thread, which must have no heap of task nodes yet, a new one rather
 *  than the heap of a thread that exited; false if it already had one. */
bool spindle_test_task_new_heap(void);
/** The calling thread's heap of task nodes: the blocks it has carved, and the bytes of
 *  slab it has taken from malloc for them (nodes.c, N7). */
void spindle_test_task_heap(uint32_t *carved, uint64_t *slab_bytes);
/** Pushes the calling thread's batch of other threads' nodes to their owners now, as a
 *  worker does before it parks. */
void spindle_task_cache_flush(void);

#ifdef __cplusplus
}
#endif

#endif
