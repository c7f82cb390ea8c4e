/*
 * submit_shutdown.pml — outside submissions racing a shutdown (pool.c, shutdown steps
 * 3 and 4; injector.c, J3; park.c, quiescent_locked).
 *
 * What is checked: when the pool declares itself terminated, every submission that was
 * accepted has been popped (run or cancelled), and none is left in the injector of a
 * pool whose workers have exited. Checked for every interleaving of two submitters, a
 * shutdown and two workers. Spin explores sequentially consistent executions, which
 * is what the protocol's seq_cst operations give it: the reservation (an RMW of `reserved`),
 * the submitter's load of `shutdown`, the shutdown's CAS, and the workers' loads of
 * both in the quiescence check.
 *
 * Abstractions:
 *   - A task is a count: `queued` is linked and not yet popped; `reserved` is J3's count,
 *     reserved minus popped, and a consumer subtracts only after it has popped.
 *   - Wake-ups are not modelled: a parked worker may wake at any moment. That allows
 *     more executions than the real wake-up protocol, so safety shown here holds there;
 *     it says nothing about lost wake-ups (park.c argues those).
 *   - The idle lock is `lock`: a worker registers as parked and checks for quiescence
 *     under it. Submitters never take it.
 *
 * Two mutants must each make the model find a lost task (scripts/model-check.sh checks
 * that they do): `-DMUTANT` reads `shutdown` before reserving, the order the protocol
 * forbids; `-DMUTANT_NO_LEN` leaves `len` out of the quiescence check.
 */
#define SUBMITTERS 2
#define WORKERS 2

byte reserved = 0;      /* the injector's reserved-minus-popped count (J3) */
byte queued = 0;    /* linked and not yet popped */
bit shutdown = 0;
bit terminated = 0;
byte parked = 0;    /* workers registered as parked, under `lock` */
bit lock = 0;
byte accepted = 0;  /* submissions that returned 0 */
byte popped = 0;    /* tasks a worker took (to run or cancel) */
byte finished = 0;  /* submitters done */

inline acquire() { atomic { lock == 0 -> lock = 1 } }
inline release() { lock = 0 }

active [SUBMITTERS] proctype Submitter() {
    bit seen;
#ifdef MUTANT
    seen = shutdown;
    reserved++;
#else
    reserved++;          /* the reservation: a seq_cst RMW */
    seen = shutdown; /* then a seq_cst load */
#endif
    if
    :: seen -> reserved--          /* refused: the reservation taken back (then notify_all) */
    :: else -> atomic { queued++; accepted++ }  /* linked: accepted (then notify_one) */
    fi;
    finished++
}

active proctype Shutdown() {
    shutdown = 1    /* step 2's CAS; step 4's notify_all is a wake-up, not modelled */
}

active [WORKERS] proctype Worker() {
    bit s; byte l;
    do
    :: terminated -> break
    :: atomic { queued > 0 -> queued-- };   /* pop (the consumer's try-lock holder) */
       popped++;
       reserved--                                /* subtracted after the pop (J3) */
    :: /* nothing found: park, and check for quiescence under the lock */
       acquire();
       parked++;
       s = shutdown;
#ifdef MUTANT_NO_LEN
       l = 0;       /* the check ignores submissions in flight */
#else
       l = reserved;
#endif
       if
       :: s && l == 0 && parked == WORKERS && queued == 0 ->
          terminated = 1;
          /* What termination promises: nothing accepted is left unpopped. */
          assert(popped == accepted);
          release();
          break
       :: else ->
          release();
          /* Asleep until woken: at any moment (wake-ups are not modelled), or for
           * good once another worker has declared termination. */
          if
          :: terminated -> break
          :: acquire(); parked--; release()
          fi
       fi
    od
}

/* After everything has stopped: a terminated pool has nothing queued, and every
 * accepted submission was popped. */
active proctype Final() {
    (terminated && finished == SUBMITTERS) ->
    assert(queued == 0 && popped == accepted)
}
