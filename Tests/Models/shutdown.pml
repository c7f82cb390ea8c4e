/*
 * shutdown.pml — a pool's shutdown with a task blocked inside it, an outside submission
 * and two callers racing each other (pool.c, shutdown steps 2 and 4-6; park.c,
 * spindle_idle_sleep, quiescent_locked, spindle_notify_all, wake_one; spare.c, C1 and
 * C3: count_out, count_in; worker.c, the main loop, find_task and found_work). The
 * protocol itself is in shutdown.inc, which shutdown_spares.pml shares.
 *
 * The scene. Two workers, no spare. The pool holds one task, WAITER, when the model
 * starts. WAITER does what a task that waits on other work does (an operation that adds
 * one and waits for it, after a wait on an outside event): it says it blocks
 * (count_out), waits for an outside event, spawns CHILD on its worker's deque, and waits
 * for CHILD, still blocked, before it says it is done (count_in). An outside thread
 * submits a task, SUBMITTED, at any moment. Two threads shut the pool down at any
 * moment, one asking to drain and one to cancel; in cancel mode a task dequeued from
 * then on is cancelled (a cancelled CHILD still ends WAITER's wait: its operation
 * finishes).
 *
 * What is checked:
 *   - Nothing lost: when a worker declares the pool terminated, no task is queued
 *     anywhere and every task made was run or cancelled.
 *   - Shutdown finishes: once nothing can move, both callers have returned, every
 *     worker has exited and the pool has stopped; a caller that lost the race returns
 *     only once the pool has stopped (step 6).
 *   - The counts stay true after every step under the idle lock: `searching` is never
 *     more than `unparked`, nor `unparked` more than the threads counted in.
 *
 * Abstractions (shutdown.inc):
 *   - The parker is a token per slot: `unpark` leaves it, `park` blocks until there is
 *     one and takes it.
 *   - find_task: the worker's own deque, the injector, then, as a searcher (at most
 *     half the workers at once, S1), the other deque and the injector, or nothing: the
 *     search's deadline may pass at any time, which allows more executions than the
 *     real spin; parking's own look at the queues (S3, step z) covers it.
 *   - What the code does under the idle lock is one step here: `unparked` and
 *     `searching` are one word that changes with one RMW, and every other variable
 *     the lock guards is read and written only under it. The quiescence check's loads
 *     of `shutdown` and of the injector's `len` against a submitter's reservation are
 *     submit_shutdown.pml's (step 3); here they are read at one instant.
 *   - wake_locked takes any listed sleeper (the code prefers the most recent one).
 *   - Counting out a worker that does not say it blocks is counted_out.pml's.
 *
 * Four mutants must each make the model find a failure (scripts/model-check.sh checks
 * that they do):
 *   -DMUTANT_NO_BLOCKED        the quiescence check does not look at workers counted
 *                              out (C3): the pool terminates under WAITER, whose
 *                              child then has no worker to run it;
 *   -DMUTANT_NO_REFUSED_WAKE   a refused submitter that takes `len` back to 0 does not
 *                              wake the workers to look for quiescence again;
 *   -DMUTANT_EARLY_RETURN      a caller that lost step 2's race returns at once;
 *   -DMUTANT_NO_TERMINATE_WAKE the worker that declares termination wakes nobody.
 */
#define NW 2        /* the pool's own workers: slots 0 and 1 */
#define SPARES 0    /* no spare slot */
#define CALLERS 2   /* one caller drains, one cancels */
#include "shutdown.inc"
