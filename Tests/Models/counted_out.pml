/*
 * counted_out.pml — a worker that blocks is counted out of the idle accounting once,
 * whoever notices it first, and counted in again exactly once (Sources/CSpindle/
 * spare.c, C1: count_out, count_in, monitor_count_out, monitor_count_in,
 * spindle_uncount_parking_locked; park.c, spindle_idle_sleep).
 *
 * Three parties move one worker's count, each under the idle lock (`lock`):
 *   the worker, in an explicit blocking section (spindle_blocking_begin/end): it raises
 *     its depth (`bdepth`, w->blocking_depth), then count_out: if the monitor counted it
 *     out already, it takes that count over (the flag goes, the counts stay); otherwise
 *     unparked -= 1, blocked += 1. At the end, count_in: under the lock, its depth back
 *     to 0, unparked += 1, blocked -= 1;
 *   the worker, in a task that blocks without saying so, and then going on, or parking:
 *     parking (spindle_idle_sleep) first takes over a monitor's count
 *     (spindle_uncount_parking_locked: the flag goes, blocked -= 1) and only otherwise
 *     leaves `unparked`; it is woken later (unparked += 1);
 *   the monitor, at any tick: monitor_count_out, if the worker is in a task, not
 *     parked, not in an explicit section (its depth read under the lock) and not
 *     counted out already: the flag, unparked -= 1, blocked += 1; or monitor_count_in,
 *     if the flag is set: the flag goes, unparked += 1, blocked -= 1.
 * The depth is a relaxed store that the monitor reads under the lock: the worker raises
 * it before count_out takes the lock and lowers it under count_in's, so the lock orders
 * each store with the monitor's read, which Spin's interleaving represents. The monitor
 * may call either function at any tick: what it saw of the thread before (same task,
 * little CPU, asleep in the kernel) is racy by design, and the functions settle it.
 *
 * What is checked, after every step under the lock: blocked is 0 or 1 and says whether
 * the worker is counted out (by itself or by the monitor), and the worker is counted
 * exactly once among unparked, blocked and parked (C1). A count lost or taken twice
 * would skew every later wake-up decision of the pool.
 *
 * Mutants (scripts/model-check.sh makes sure each fails):
 *   -DMUTANT_COUNT_TWICE   count_out does not look at the monitor's flag.
 *   -DMUTANT_PARK_KEEPS    parking does not take over the monitor's count.
 *   -DMUTANT_NO_DEPTH      the monitor does not look at the depth.
 *   -DMUTANT_DEPTH_EARLY   the worker lowers its depth before count_in takes the lock:
 *                          a monitor in between counts it out a second time.
 */
bit lock = 0;
byte unparked = 1;    /* the idle word's unparked count (one worker) */
byte blocked = 0;     /* pool->blocked */
bit counted_out = 0;  /* w->counted_out: the monitor's count */
bit self_out = 0;     /* ghost: the worker's own count (count_out .. count_in) */
bit in_sleepers = 0;  /* parked */
bit in_task = 0;      /* running a task (the monitor looks only then) */
byte bdepth = 0;      /* w->blocking_depth */

inline acquire() { atomic { lock == 0 -> lock = 1 } }
inline release() {
    assert(blocked <= 1);
    assert(blocked == (counted_out | self_out));                  /* C1 */
    assert(unparked + blocked + in_sleepers == 1);                /* counted once */
    lock = 0
}

proctype worker() {
    byte round = 0;
    bit already;
    do
    :: round < 3 ->
       round++;
       in_task = 1;
       if
       :: /* an explicit blocking section */
          bdepth = 1;
          acquire();                                              /* count_out */
          already = counted_out;
          counted_out = 0;
#ifdef MUTANT_COUNT_TWICE
          already = 0;
#endif
          if
          :: !already -> unparked--; blocked++
          :: else -> skip
          fi;
          self_out = 1;
          release();
          /* ... blocked ... */
#ifdef MUTANT_DEPTH_EARLY
          bdepth = 0;                       /* before the lock */
          acquire();                                              /* count_in */
#else
          acquire();                                              /* count_in */
          bdepth = 0;                       /* under the lock, with the count */
#endif
          unparked++;
          blocked--;
          self_out = 0;
          release()
       :: /* a task that blocks without saying so: the monitor may count it */
          skip
       fi;
       in_task = 0;
       if
       :: /* park, then be woken */
          acquire();                                              /* spindle_idle_sleep */
#ifdef MUTANT_PARK_KEEPS
          unparked--;
#else
          if
          :: counted_out -> counted_out = 0; blocked--            /* took over the count */
          :: else -> unparked--
          fi;
#endif
          in_sleepers = 1;
          release();
          acquire();                                              /* woken */
          in_sleepers = 0;
          unparked++;
          release()
       :: /* go on to the next task */
          skip
       fi
    :: else -> break
    od
}

proctype monitor() {
    byte tick = 0;
    do
    :: tick < 4 ->
       tick++;
       if
       :: acquire();                                              /* monitor_count_out */
          if
#ifdef MUTANT_NO_DEPTH
          :: in_task && !counted_out && !in_sleepers ->
#else
          :: in_task && !counted_out && !in_sleepers && bdepth == 0 ->
#endif
             counted_out = 1; unparked--; blocked++
          :: else -> skip
          fi;
          release()
       :: acquire();                                              /* monitor_count_in */
          if
          :: counted_out -> counted_out = 0; unparked++; blocked--
          :: else -> skip
          fi;
          release()
       fi
    :: else -> break
    od
}

init {
    atomic { run worker(); run monitor() }
}
