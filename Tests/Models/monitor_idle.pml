/*
 * monitor_idle.pml — the monitor sleeps only while it has nothing to watch (Sources/
 * CSpindle/spare.c, MI1: monitor_main's idle sleep and spindle_monitor_poke;
 * spindle_monitor_register; park.c, wake_then_poke; worker.c, retire).
 *
 * The monitor is what notices a worker that blocks in a task without saying so (C1):
 * asleep, it notices nothing. It sleeps when every worker of every pool it watches is
 * parked or retired (W6), and whoever makes a worker run again afterwards pokes it. A
 * poke that is lost leaves a worker running unwatched: should its task block, the
 * work queued behind it waits until some later wake-up pokes the monitor, or for ever.
 *
 * The model follows the steps, each a seq_cst operation or under a lock, which Spin's
 * interleavings represent:
 *   the monitor: reads whether any registered pool has a worker unparked and not
 *     retired; if so it ticks (looks at the workers) and reads again; if not, it
 *     announces (mon_idle = 1), looks once more, and with still nothing to watch
 *     sleeps on the word (FUTEX_WAIT: asleep only if the word is still 1, checked
 *     atomically with going to sleep) until it reads 0; then it clears the word;
 *   a poke: if the word reads 1, exchange in 0, and if that read 1, FUTEX_WAKE;
 *   a waker (a submission's wake_one): under the idle lock, takes a parked worker off
 *     the list and counts it unparked (the RMW), then unparks it and pokes;
 *   a worker: runs; at a safe point above the active limit it retires (retired += 1,
 *     still counted unparked), waits for the limit to rise, counts itself back
 *     (retired -= 1) and pokes; or it parks (under the lock, unparked -= 1) until a
 *     waker's token; or its task blocks for ever without saying so; or its task says
 *     it blocks (spindle_blocking_begin: under the lock, unparked -= 1 and
 *     blocked += 1), and then either blocks for ever, its spare refused, so that only
 *     the monitor's tick tries the spare again (C4), or returns and counts itself back
 *     in (under the lock, blocked -= 1 and unparked += 1) and runs on;
 *   the limiter (spindle_pool_set_active_workers: the monitor itself, following a CPU
 *     limit, or the C API): lowers the active limit to one worker and raises it back;
 *   the creator: the pool's workers start unparked; it registers the pool with the
 *     monitor, then pokes.
 * Both looks (pool_has_watch) read the unparked count and `blocked` together, under the
 * idle lock, then `retired`.
 *
 * What is checked: when nothing can move, the monitor is asleep only if every worker of
 * the registered pool is parked or retired, and none is counted out (MI1). A worker
 * whose task blocks for ever stays unparked, or counted out, and can no longer move, so
 * a lost poke or a look that misses it leaves exactly that state.
 *
 * Mutants (scripts/model-check.sh makes sure each fails):
 *   -DMUTANT_NO_SECOND_LOOK   the monitor sleeps right after announcing.
 *   -DMUTANT_LOOK_FIRST       the monitor looks, then announces.
 *   -DMUTANT_POKE_FIRST       a waker pokes before it counts the worker unparked.
 *   -DMUTANT_RESUME_QUIETLY   a retired worker resumes without poking.
 *   -DMUTANT_REGISTER_QUIETLY a new pool is registered without a poke.
 *   -DMUTANT_SECOND_LOOK_UNPARKED_ONLY the look before sleeping asks only whether a
 *                             worker is unparked, not whether one is counted out.
 *   -DMUTANT_COUNTS_APART     a look reads the unparked count without the lock, then
 *                             `blocked` under it.
 */
#define WORKERS 2
#define NOBODY 255

bit registered = 0;       /* the pool is on the monitor's list (mon_pools) */
byte unparked = WORKERS;  /* the idle word's unparked count: workers start unparked */
byte retired = 0;         /* pool->retired */
byte blocked = 0;         /* pool->blocked: workers counted out (C1) */
bit limit_low = 0;        /* active_limit is 1: worker 1 retires at its next safe point */
bit mon_idle = 0;         /* the monitor's announcement */
bit msleep = 0;           /* the monitor asleep in FUTEX_WAIT on mon_idle */
bit lock = 0;             /* the idle lock */
bit parked[WORKERS];      /* on the sleepers list */
bit token[WORKERS];       /* the parker's NOTIFIED */

inline acquire() { atomic { lock == 0 -> lock = 1 } }
inline release() { lock = 0 }

/* spindle_monitor_poke; `old` is the caller's local. */
inline poke() {
    if
    :: mon_idle == 1 ->
       atomic { old = mon_idle; mon_idle = 0 };
       if
       :: old == 1 -> msleep = 0                     /* FUTEX_WAKE */
       :: else -> skip
       fi
    :: else -> skip
    fi
}

/* The monitor's look at its pools (pool_has_watch): the list under its lock, then the
 * counts. `second`: the look after the announcement. */
inline look(second) {
    reg = registered;
#ifdef MUTANT_COUNTS_APART
    u = unparked;
    acquire();
    b = blocked;
    release();
#else
    acquire();
    u = unparked;
    b = blocked;
    release();
#endif
    r = retired;
#ifdef MUTANT_SECOND_LOOK_UNPARKED_ONLY
    if
    :: second -> b = 0
    :: else -> skip
    fi;
#endif
    busy = reg && (b > 0 || u > r)
}

proctype Monitor() {
    bit reg, busy;
    byte u, b, r;
    do
    :: look(0);
       if
       :: busy -> skip                               /* a tick: watch_pool */
       :: else ->
#ifdef MUTANT_LOOK_FIRST
          look(1);
          mon_idle = 1;
#else
          mon_idle = 1;                              /* announce */
#ifndef MUTANT_NO_SECOND_LOOK
          look(1);                                   /* and look once more */
#else
          busy = 0;
#endif
#endif
          if
          :: !busy ->
             do
             :: mon_idle == 1 ->
                atomic {
                   if
                   :: mon_idle == 1 -> msleep = 1    /* FUTEX_WAIT(&mon_idle, 1) */
                   :: else -> skip
                   fi
                };
                msleep == 0
             :: else -> break
             od
          :: else -> skip
          fi;
          mon_idle = 0
       fi
    od
}

proctype Worker(byte id) {
    bit old;
    do
    :: id == 1 && limit_low ->
       /* W6: retire at a safe point, still counted unparked. */
       retired++;
       limit_low == 0;                               /* the raise's retire_seq wake */
       retired--;
#ifndef MUTANT_RESUME_QUIETLY
       poke()
#endif
    :: id != 1 || !limit_low ->
       if
       :: /* a task that blocks for ever without saying so: unparked, unmoving */
          break
       :: /* nothing to do: park until a waker's token */
          acquire();
          unparked--;
          parked[id] = 1;
          release();
          atomic { token[id] == 1 -> token[id] = 0 }
       :: id == 0 ->
          /* a task that says it blocks: counted out (count_out). One worker is
           * enough to show it; worker 1 is the one that retires. */
          acquire();
          unparked--;
          blocked++;
          release();
          if
          :: /* for ever: its spare refused, only the monitor tries it again */
             break
          :: /* it returns: counted back in (count_in), and runs on */
             acquire();
             blocked--;
             unparked++;
             release()
          fi
       fi
    od
}

proctype Waker() {
    byte n = 0;
    byte wakee;
    bit old;
    do
    :: n < 2 ->
       n++;
#ifdef MUTANT_POKE_FIRST
       poke();
#endif
       acquire();
       wakee = NOBODY;
       if
       :: parked[0] -> parked[0] = 0; wakee = 0
       :: parked[1] -> parked[1] = 0; wakee = 1
       :: else -> skip
       fi;
       if
       :: wakee != NOBODY -> unparked++              /* wake_locked's RMW */
       :: else -> skip
       fi;
       release();
       if
       :: wakee != NOBODY ->
          token[wakee] = 1;                          /* unpark, */
#ifndef MUTANT_POKE_FIRST
          poke()                                     /* then poke */
#else
          skip
#endif
       :: else -> skip
       fi
    :: else -> break
    od
}

proctype Limiter() {
    limit_low = 1;
    limit_low = 0
}

proctype Creator() {
    bit old;
    registered = 1;
#ifndef MUTANT_REGISTER_QUIETLY
    poke()
#endif
}

init {
    atomic {
        run Monitor();
        run Worker(0);
        run Worker(1);
        run Waker();
        run Limiter();
        run Creator()
    }
}

/* MI1: when nothing can move, an asleep monitor has nothing to watch. (An awake monitor
 * can always move: it ticks, or goes to sleep.) */
active proctype Final() {
    timeout -> assert(!(msleep && registered && (unparked > retired || blocked > 0)))
}
