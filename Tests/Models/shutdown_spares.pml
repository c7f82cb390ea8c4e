/*
 * shutdown_spares.pml — a spare standing in for a blocked worker: claimed, started or
 * refused by the system, retired when idle, and stopped by a shutdown (spare.c, C2-C4:
 * spindle_claim_spare_locked, spindle_spare_start_failed, spindle_retire_spare_locked,
 * watch_pool's retry; park.c, wake_one and spindle_idle_sleep's timed park; pool.c,
 * shutdown steps 4-5; worker.c, a spare's exit). The protocol is in shutdown.inc,
 * which shutdown.pml shares; its header gives the scene and the abstractions.
 *
 * The scene. One worker and one spare slot, so that only a spare can run what WAITER
 * waits for while WAITER blocks. WAITER blocks on an outside event, spawns CHILD (on the
 * worker's deque, or the injector when a spare runs WAITER) and waits for it, blocked;
 * an outside thread submits SUBMITTED; one caller drains the pool at any moment. A
 * claimed spare's thread is started later by the spawner, on its own thread, and the
 * system may refuse it once (C4): the pool then claims none until the pause after the
 * refusal has passed, at any moment, and the next notify or the monitor's tick claims
 * the spare again. A spare that finds no work parks with a timeout (its spare_idle_ns)
 * and, timed out, retires: its slot goes vacant, and a later claim starts a new
 * thread in it.
 *
 * What is checked, beyond shutdown.pml's properties:
 *   - Nothing is stuck on a refusal: WAITER waits for its child whatever the system
 *     refused, and the model still finishes.
 *   - No use after free (C2): the pool is freed once its caller and the submitter are
 *     done with it, as the Swift ThreadPool's deinit frees it, and a spare's last touch
 *     of the pool (spares_running) comes before that.
 *
 * Five mutants must each make the model find a failure (scripts/model-check.sh checks
 * that they do):
 *   -DMUTANT_NO_SPARE_WAIT     shutdown does not wait for spare threads to exit (C2);
 *   -DMUTANT_RETIRE_LISTED     a spare that times out retires without looking whether a
 *                              waker took it off the list (and counted it in) meanwhile;
 *   -DMUTANT_NO_MONITOR_RETRY  the monitor does not claim a spare again after a refusal:
 *                              WAITER waits for ever for the child queued behind it;
 *   -DMUTANT_NO_BLOCKED        the quiescence check does not look at workers counted
 *                              out (C3): the pool terminates under WAITER, and claims no
 *                              spare for its child;
 *   -DMUTANT_REFUSED_SPARE_NO_WAKE  a spare refused during a shutdown does not wake
 *                              the workers: the last one parked while the spare still
 *                              counted, and nobody looks for quiescence again.
 */
#define NW 1        /* the pool's own worker: slot 0 */
#define SPARES 1    /* the spare's slot: 1 */
#define CALLERS 1   /* one caller drains */
#include "shutdown.inc"
