/*
 * offload.pml — an awaited offload (`ThreadPool.run`) against its task's cancellation
 * and the pool: resumed exactly once, its admission place given back exactly once, and
 * the engine's reference dropped exactly once (Sources/Spindle/Pool/
 * ThreadPool+Async.swift, OF1-OF3: awaitOffload, Offload.publish, cancel, start,
 * discard, OffloadBase.leavePending, submissionNode, refused).
 *
 * Three parties share one offload through its `phase` word:
 *   the awaiting task, inside its continuation's closure: stores the continuation and
 *     publishes it with one CAS unpublished -> pending (OF1); if that fails (a
 *     cancellation came first, OF2) it resumes the continuation with CancellationError
 *     and submits nothing. Otherwise it takes the engine's reference (OF3) and submits
 *     the offload; the engine may refuse it (a pool shutting down), and then the task
 *     drops that reference and discards the offload with the refusal;
 *   the engine, once the offload is queued: drops its reference as it runs the node,
 *     and starts the offload (a worker runs it) or, in a cancelling shutdown, discards
 *     it;
 *   the task's cancellation handler, once, at any moment, even before the closure
 *     runs: one CAS unpublished -> cancelled, which gives the admission place back
 *     (OF2); or, once published, leaves pending for cancelled and resumes.
 * Leaving pending (start, cancel, discard) is one CAS from pending (OF1); its winner
 * gives the place back and resumes the continuation, and every other party does
 * nothing.
 *
 * What is checked: the continuation is resumed only after it was stored, never twice;
 * and when nothing can move, it has been resumed, the place has been given back once
 * and the engine holds no reference.
 *
 * Mutants (scripts/model-check.sh makes sure each fails):
 *   -DMUTANT_LEAVE_BY_STORE     leaving pending is a load and a store, not one CAS.
 *   -DMUTANT_PUBLISH_BY_STORE   publication is a load and a store, not one CAS.
 *   -DMUTANT_CANCEL_KEEPS_PLACE a cancellation before publication does not give the
 *                               place back.
 *   -DMUTANT_REFUSED_KEEPS_REF  a refused submission keeps the engine's reference.
 */
#define UNPUBLISHED 0
#define PENDING 1
#define STARTED 2
#define CANCELLED 3
#define DISCARDED 4

byte phase = UNPUBLISHED;
bit stored = 0;      /* the continuation is in the offload */
byte resumed = 0;
byte given = 0;      /* admission places given back */
byte refs = 0;       /* the engine's references */
bit queued = 0;      /* the engine holds the node */

inline resume() {
    atomic { assert(stored && resumed == 0); resumed++ }
}

/* leavePending(next): the caller's local `won`. */
inline leavePending(next) {
#ifdef MUTANT_LEAVE_BY_STORE
    won = (phase == PENDING);
    if
    :: won -> phase = next
    :: else -> skip
    fi;
#else
    atomic {
        if
        :: phase == PENDING -> phase = next; won = 1
        :: else -> won = 0
        fi
    };
#endif
    if
    :: won -> given++                                /* admission?.giveBack */
    :: else -> skip
    fi
}

proctype Task() {
    bit ok, won;
    stored = 1;                                      /* continuation = c */
#ifdef MUTANT_PUBLISH_BY_STORE
    ok = (phase == UNPUBLISHED);
    if
    :: ok -> phase = PENDING
    :: else -> skip
    fi;
#else
    atomic {
        if
        :: phase == UNPUBLISHED -> phase = PENDING; ok = 1
        :: else -> ok = 0
        fi
    };
#endif
    if
    :: !ok -> resume()                               /* CancellationError (OF2) */
    :: ok ->
       refs++;                                       /* submissionNode (OF3) */
       if
       :: queued = 1                                 /* spindle_submit_task accepts */
       :: /* refused */
#ifndef MUTANT_REFUSED_KEEPS_REF
          refs--;
#endif
          leavePending(DISCARDED);
          if
          :: won -> resume()
          :: else -> skip
          fi
       fi
    fi
}

proctype Engine() {
    bit won;
    byte next;
    queued == 1;
    refs--;                                          /* takeRetainedValue */
    if
    :: next = STARTED                                /* a worker runs it: start() */
    :: next = DISCARDED                              /* a cancelling shutdown: discard */
    fi;
    leavePending(next);
    if
    :: won -> resume()                               /* the result, or the refusal */
    :: else -> skip
    fi
}

proctype Canceller() {
    bit won;
    atomic {
        if
        :: phase == UNPUBLISHED -> phase = CANCELLED; won = 1
        :: else -> won = 0
        fi
    };
    if
    :: won ->
#ifndef MUTANT_CANCEL_KEEPS_PLACE
       given++
#else
       skip
#endif
    :: else ->
       leavePending(CANCELLED);
       if
       :: won -> resume()
       :: else -> skip
       fi
    fi
}

init {
    atomic {
        run Task();
        run Engine();
        if
        :: run Canceller()
        :: skip                                      /* never cancelled */
        fi
    }
}

/* When nothing can move: resumed, the place back once, no reference left. (The engine
 * waits for ever only when nothing was queued.) */
active proctype Final() {
    timeout -> assert(resumed == 1 && given == 1 && refs == 0)
}
