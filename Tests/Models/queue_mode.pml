/*
 * queue_mode.pml — a queue leaving direct mode, against finishers that take no lock: no
 * ready operation is stranded, and a width holds (Sources/Spindle/Operations/Internals/
 * QueueMode.swift, D1-D3: startWhatCan; QueueMembership.swift: registerLocked,
 * operationFinished, finishLocked; QueueState.swift: takeStartable).
 *
 * `counts` is one word: the unfinished operations, the running ones and `scheduledBit`;
 * here `unf`, `running` and `sched`, changed together by each atomic step. The program
 * adds four operations, each ready, with the block form of `addOperation` (a fresh
 * operation), while another thread of the program gives the queue a width of one and
 * may take it away again. Each operation the queue starts finishes when it likes:
 *   an add, under the lock (A3): counted in, and in direct mode with no ready
 *     operation ahead, counted as running and started (D1); otherwise onto the ready
 *     list, and `takeStartable`. An operation added out of direct mode holds its queue;
 *   `takeStartable`, under the lock: while the width allows (no width, or fewer running
 *     than it, a seq_cst load of `counts`) and a ready operation waits, pop it, count it
 *     running (an RMW), start it;
 *   a change of width (`startWhatCan`), under the lock: the new width and mode, the
 *     scheduled bit set or cleared by an RMW, then `takeStartable`. The width may stay,
 *     so that nothing but the finishers can start what waits;
 *   a finisher of an operation that holds its queue: one RMW taking it off both counts,
 *     then the lock if that left nothing unfinished or the bit is set;
 *   any other finisher (D2, LT1): a CAS from a guess, repeated with what it read while
 *     the bit is clear and another operation is unfinished; otherwise the lock, where
 *     it takes itself off the counts; under the lock, `takeStartable`.
 * Starting an operation is spawning its finisher, after the lock, as `dispatch` does.
 * Suspension, `addOperations` batches and custom readiness leave direct mode the same
 * way, by the bit, and are left out; so are progress and count observers, which only
 * send more finishers to the lock.
 *
 * What is checked: an operation started while the width is one starts when no other
 * operation of the queue is running (the width); and when nothing can move, no
 * operation waits on the ready list and the counts are back to zero (D3: none is
 * stranded).
 *
 * Mutants (scripts/model-check.sh makes sure each fails):
 *   -DMUTANT_CAS_IGNORES_BIT    a lock-free finisher's CAS retries with the bit set.
 *   -DMUTANT_HELD_IGNORES_BIT   a holding finisher takes the lock only when nothing
 *                               is left unfinished.
 *   -DMUTANT_BIT_BY_STORE       a change of width sets the bit by a load and a store
 *                               of the whole word.
 *   -DMUTANT_START_WHEN_EMPTY   an add starts its operation whenever no ready one waits,
 *                               in direct mode or not.
 */
#define OPS 4

bit lock = 0;
byte unf = 0;         /* counts >> 32: added and not finished */
byte running = 0;     /* counts & runningMask: started and not finished */
bit sched = 0;        /* counts' scheduledBit: out of direct mode */
bit direct = 1;       /* State.direct, under the lock: no width (maxConcurrent < 0) */
bit width1 = 0;       /* maxConcurrent == 1, under the lock */
byte readyq = 0;      /* the ready lists' length */
byte live = 0;        /* ghost: operations running, from their start to their finish's count */

inline acquire() { atomic { lock == 0 -> lock = 1 } }
inline release() { lock = 0 }

/* Under the lock: starts what the width allows; `nstart` is the caller's count of
 * finishers to spawn after the lock. */
inline takeStartable() {
    do
    :: readyq > 0 && (!width1 || running < 1) ->
       assert(!width1 || live == 0);                 /* the width */
       readyq--;
       atomic { running++; live++ };
       nstart++
    :: else -> break
    od
}

/* After the lock: `dispatch`. Every operation started from the ready list was added out
 * of direct mode, so it holds its queue. */
inline dispatchStarted() {
    do
    :: nstart > 0 -> nstart--; run Finisher(1)
    :: else -> break
    od
}

proctype Finisher(bit held) {
    byte nstart = 0;
    byte cu, cr;
    bit cs, done = 0, locked = 0, takes = 1;
    if
    :: held ->
       atomic { unf--; running--; live--; cu = unf; cs = sched };     /* one RMW */
#ifdef MUTANT_HELD_IGNORES_BIT
       locked = (cu == 0);
#else
       locked = (cu == 0 || cs);
#endif
       takes = 0
    :: else ->
       cu = 2; cr = 1; cs = 0;                       /* the guess */
       do
#ifdef MUTANT_CAS_IGNORES_BIT
       :: !done && cu >= 2 ->
#else
       :: !done && !cs && cu >= 2 ->
#endif
          atomic {
             if
             :: unf == cu && running == cr && sched == cs -> unf--; running--; live--; done = 1
             :: else -> cu = unf; cr = running; cs = sched
             fi
          }
       :: else -> break
       od;
       locked = !done
    fi;
    if
    :: locked ->
       acquire();                                    /* finishLocked */
       if
       :: takes -> atomic { unf--; running--; live-- }
       :: else -> skip
       fi;
       takeStartable();
       release();
       dispatchStarted()
    :: else -> skip
    fi
}

proctype Adder() {
    byte i = 0, nstart = 0;
    bit held;
    do
    :: i < OPS ->
       i++;
       acquire();                                    /* registerLocked */
       held = !direct;
       if
#ifdef MUTANT_START_WHEN_EMPTY
       :: readyq == 0 ->
#else
       :: direct && readyq == 0 ->                   /* D1: started as it is added */
#endif
          assert(!width1 || live == 0);              /* the width */
          atomic { unf++; running++; live++ };
          release();
          run Finisher(held)
       :: else ->
          atomic { unf++ };
          readyq++;
          takeStartable();
          release();
          dispatchStarted()
       fi
    :: else -> break
    od
}

/* `startWhatCan` with a new width: 1, or none. */
inline changeWidth(one) {
    acquire();
    width1 = one;
    direct = !one;
#ifdef MUTANT_BIT_BY_STORE
    cu = unf; cr = running;
    unf = cu; running = cr; sched = one;
#else
    sched = one;                                     /* an RMW on the bit alone */
#endif
    takeStartable();
    release();
    dispatchStarted()
}

proctype Changer() {
    byte nstart = 0, cu, cr;
    changeWidth(1);
    if
    :: changeWidth(0)
    :: skip
    fi
}

init {
    atomic { run Adder(); run Changer() }
}

/* D3: when nothing can move, nothing is stranded on the ready list and the counts are
 * back to zero. */
active proctype Final() {
    timeout -> assert(readyq == 0 && unf == 0 && running == 0)
}
