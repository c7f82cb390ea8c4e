/*
 * run_state.pml — the runner borrows the queue list's reference to the operation it
 * runs: the operation is released exactly once, by the list or by the runner, and
 * never while the runner, a prune or a drain still touches it (Sources/Spindle/
 * Operations/Internals/ChainRunner.swift, CR1 and CR4: runnerDone; QueueRegistry.swift:
 * mayRelease, prune, unlinkAll; QueueFields.swift: QueueSync.runState).
 *
 * A block operation the queue made and started: the queue's list holds its one
 * reference, and the runner holds none (CR1).
 *   the runner: touches the operation (start(), main()); its finish marks it done
 *     and, being the last unfinished, may drain the queue itself, under the lock;
 *     touches it again (the runner's epilogue); then `runnerDone`: one RMW setting
 *     its bit, and if the drain's bit was already set, it releases the operation
 *     (CR4);
 *   the adding thread, under the queue's lock, at any moment: a prune, which takes
 *     the operation off the list only if it is done and its runner is done (a load of
 *     the runner's bit) and then releases it;
 *   a drain (the finisher that reads zero, here the runner or another thread), under
 *     the queue's lock, once the operation is done: unlinks it (writes to it), then
 *     one RMW setting the drain's bit; if the runner's bit was already set, the
 *     reference is the drain's to release, else the runner's.
 *
 * What is checked: every touch finds the operation alive; it is released at most once,
 * and when nothing can move, it has been released unless the list still links it.
 *
 * Mutants (scripts/model-check.sh makes sure each fails):
 *   -DMUTANT_PRUNE_IGNORES_RUNNER  a prune takes a done operation whose runner is not.
 *   -DMUTANT_DRAIN_RELEASES        a drain releases what it unlinks, whatever the runner.
 *   -DMUTANT_RUNNER_BY_STORE       `runnerDone` is a load and a store.
 *   -DMUTANT_TOUCH_AFTER_DONE      the runner touches the operation after `runnerDone`.
 */
bit lock = 0;
bit done = 0;          /* queueSync.done */
bit runnerBit = 0;     /* runState & runnerDone */
bit listBit = 0;       /* runState & listGone */
bit linked = 1;        /* on the queue's list */
byte released = 0;     /* ghost: releases of the list's reference */

inline lock_() { atomic { lock == 0 -> lock = 1 } }
inline unlock_() { lock = 0 }
inline touch() { assert(released == 0) }
inline release() { atomic { assert(released == 0); released++ } }

/* unlinkAll's step for this operation, under the lock; `before` is the caller's. */
inline drain() {
    if
    :: linked && done ->
       touch();                                      /* detach: writes to it */
       linked = 0;
       atomic { before = runnerBit; listBit = 1 };
#ifdef MUTANT_DRAIN_RELEASES
       release()
#else
       if
       :: before -> release()                        /* ours */
       :: else -> skip                               /* the runner's */
       fi
#endif
    :: else -> skip
    fi
}

proctype Runner() {
    bit before, drains;
    touch();                                         /* start(), main() */
    done = 1;                                        /* its finish */
    if
    :: drains = 1                                    /* the last finisher drains */
    :: drains = 0
    fi;
    if
    :: drains -> lock_(); drain(); unlock_()
    :: else -> skip
    fi;
    touch();                                         /* the runner's epilogue */
#ifdef MUTANT_RUNNER_BY_STORE
    before = listBit;
    runnerBit = 1;
#else
    atomic { before = listBit; runnerBit = 1 };      /* runnerDone */
#endif
    if
    :: before -> release()
    :: else -> skip
    fi;
#ifdef MUTANT_TOUCH_AFTER_DONE
    touch()
#else
    skip
#endif
}

proctype Other() {
    bit before, prune;
    if
    :: prune = 1                                     /* the adding thread's prune */
    :: prune = 0                                     /* a drain by another finisher */
    fi;
    lock_();
    if
    :: prune ->
#ifdef MUTANT_PRUNE_IGNORES_RUNNER
       if
       :: linked && done -> touch(); linked = 0; release()
       :: else -> skip
       fi
#else
       if
       :: linked && done && runnerBit -> touch(); linked = 0; release()
       :: else -> skip
       fi
#endif
    :: else -> drain()
    fi;
    unlock_()
}

init {
    atomic { run Runner(); run Other(); run Other() }
}

/* When nothing can move, an operation off the list has been released (a list that still
 * links it still holds its reference). */
active proctype Final() {
    timeout -> assert(linked || released == 1)
}
