/*
 * queue_pins.pml — code outside a queue reaching it through an operation that is
 * finishing: never a freed queue, and the operation's reference to it dropped exactly
 * once (Sources/Spindle/Operations/Internals/QueueFields.swift, Q1-Q3:
 * withPinnedQueue, dropQueue, releaseQueueReference).
 *
 * An operation that holds its queue (`queueReference`) is cancelled, or has its
 * readiness or priority changed, on other threads while it finishes: each of those
 * pins the queue to reach it. The operation's reference is taken here to be the
 * queue's last, so the queue is freed the moment it is dropped:
 *   a pinner: one RMW adding a pin, then a load of `word`; if it names the queue, the
 *     pinner uses the queue; then one RMW taking its pin off, and if that leaves the
 *     word cleared, no pin and not released, `releaseQueueReference`;
 *   the finish (`dropQueue`): clears `word`; then one CAS from "no pin, no flag" to
 *     cleared and released, which drops the reference; failing that (pins are held),
 *     an RMW setting `pinsCleared`, then `releaseQueueReference`;
 *   `releaseQueueReference`: one CAS from exactly `pinsCleared` to cleared and
 *     released; its winner drops the reference.
 *
 * What is checked: a pinner that reads the queue in `word` finds it alive (Q1, Q2); the
 * reference is dropped at most once, and when nothing can move it has been dropped
 * (Q3).
 *
 * Mutants (scripts/model-check.sh makes sure each fails):
 *   -DMUTANT_READ_BEFORE_PIN    a pinner reads `word` before it adds its pin.
 *   -DMUTANT_CLEAR_LAST         the finish clears `word` after it has flagged the pins
 *                               (and maybe dropped the reference).
 *   -DMUTANT_LAST_PIN_KEEPS     the last pin out does not try to drop the reference.
 *   -DMUTANT_RELEASE_BY_STORE   `releaseQueueReference` is a load and a store.
 */
#define PINNERS 2

bit word = 1;         /* queueSync.word names the queue */
byte pins = 0;        /* the pin count in `pins` */
bit cleared = 0;      /* pinsCleared */
bit released = 0;     /* pinsReleased */
bit ref = 1;          /* queueReference: the queue's last reference */
bit freed = 0;        /* the queue */

inline drop() {
    atomic { assert(ref == 1 && !freed); ref = 0; freed = 1 }
}

inline releaseQueueReference() {
#ifdef MUTANT_RELEASE_BY_STORE
    won = (pins == 0 && cleared && !released);
    if
    :: won -> released = 1
    :: else -> skip
    fi;
#else
    atomic {
        if
        :: pins == 0 && cleared && !released -> released = 1; won = 1
        :: else -> won = 0
        fi
    };
#endif
    if
    :: won -> drop()
    :: else -> skip
    fi
}

proctype Pinner() {
    bit seen, last, won;
#ifdef MUTANT_READ_BEFORE_PIN
    seen = word;
    pins++;
#else
    pins++;                                          /* Q1: the pin first */
    seen = word;
#endif
    if
    :: seen -> assert(!freed)                        /* using the queue */
    :: else -> skip
    fi;
    atomic { pins--; last = (pins == 0 && cleared && !released) };
#ifndef MUTANT_LAST_PIN_KEEPS
    if
    :: last -> releaseQueueReference()
    :: else -> skip
    fi
#endif
}

proctype Finish() {
    bit won;
#ifndef MUTANT_CLEAR_LAST
    word = 0;                                        /* dropQueue */
#endif
    atomic {
        if
        :: pins == 0 && !cleared && !released -> cleared = 1; released = 1; won = 1
        :: else -> won = 0
        fi
    };
    if
    :: won -> drop()
    :: else ->
       cleared = 1;                                  /* an RMW on the flag alone */
       releaseQueueReference()
    fi;
#ifdef MUTANT_CLEAR_LAST
    word = 0;
#endif
    skip
}

init {
    byte i = 0;
    atomic {
        do
        :: i < PINNERS -> run Pinner(); i++
        :: else -> break
        od;
        run Finish()
    }
}

/* Q3: when nothing can move, the reference has been dropped. */
active proctype Final() {
    timeout -> assert(ref == 0 && freed)
}
