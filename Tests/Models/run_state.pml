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
 *     loads the runner's bit, and if it is clear, one RMW setting the drain's bit (with
 *     `reports`: the operation is a plain one); if the runner's bit was set, the
 *     reference is the drain's to release, else the runner's. Then the queue's wait: it returns at once if nothing is left
 *     to a runner; else the drain counts the runner in `releasing` and hands it the
 *     queue's reference to itself, and the runner, once it has released the
 *     operation, takes the lock, counts itself out, lets the wait return if it was the
 *     last, and drops that reference (OperationQueue.drainedOperationReleased).
 *
 * What is checked: every touch finds the operation alive; it is released at most once,
 * and when nothing can move, it has been released unless the list still links it.
 * The queue's wait returns only once the operation has been released, and after a
 * drain it does return; the queue is touched only while referenced, and once drained
 * and with nothing left to do, nothing refers to it.
 *
 * Mutants (scripts/model-check.sh makes sure each fails):
 *   -DMUTANT_PRUNE_IGNORES_RUNNER  a prune takes a done operation whose runner is not.
 *   -DMUTANT_DRAIN_RELEASES        a drain releases what it unlinks, whatever the runner.
 *   -DMUTANT_RUNNER_BY_STORE       `runnerDone` is a load and a store.
 *   -DMUTANT_TOUCH_AFTER_DONE      the runner touches the operation after `runnerDone`.
 *   -DMUTANT_WAIT_AT_DRAIN         the wait returns at the drain, whoever releases.
 *   -DMUTANT_REPORT_UNREFERENCED   the drain drops the queue's reference to itself even
 *                                  when a runner will report to the queue.
 */
bit lock = 0;
bit done = 0;          /* queueSync.done */
bit runnerBit = 0;     /* runState & runnerDone */
bit listBit = 0;       /* runState & listGone */
bit linked = 1;        /* on the queue's list */
byte released = 0;     /* ghost: releases of the list's reference */
byte releasing = 0;    /* the queue's count of runners yet to report */
bit drained = 0;       /* the drain has unlinked the operation */
bit woken = 0;         /* the queue's wait has returned */
byte queueRefs = 1;    /* references to the queue: its own to itself, until the drain */

inline lock_() { atomic { lock == 0 -> lock = 1 } }
inline unlock_() { lock = 0 }
inline touch() { assert(released == 0) }
inline release() { atomic { assert(released == 0); released++ } }
inline touchQueue() { assert(queueRefs > 0) }
inline wake() { woken = 1 }

/* The drain, under the lock: unlinkAll's step for this operation, then the wait's
 * return or the count of the runner left to report. `before`, `mine` and `handed` are
 * the caller's: `mine`, this caller drained; `handed`, the queue's reference to itself
 * went to the runner, else this caller drops it after unlocking. */
inline drain() {
    if
    :: linked && done ->
       touchQueue();
       touch();                                      /* detach: writes to it */
       linked = 0;
       drained = 1;
       mine = 1;
       if
       :: runnerBit -> before = 1                    /* a load: the runner is done */
       :: else -> atomic { before = runnerBit; listBit = 1 }
       fi;
#ifdef MUTANT_DRAIN_RELEASES
       release()
#else
       if
       :: before -> release()                        /* ours */
       :: else -> releasing++;                       /* the runner's, and its report */
#ifndef MUTANT_REPORT_UNREFERENCED
          handed = 1
#endif
       fi;
#endif
#ifdef MUTANT_WAIT_AT_DRAIN
       woken = 1
#else
       if
       :: releasing == 0 -> wake()
       :: else -> skip
       fi
#endif
    :: else -> skip
    fi
}

/* After unlocking: the queue's reference to itself, unless the runner has it. */
inline dropSelf() {
    if
    :: mine && !handed -> touchQueue(); queueRefs--
    :: else -> skip
    fi
}

proctype Runner() {
    bit before, drains, mine, handed;
    touch();                                         /* start(), main() */
    done = 1;                                        /* its finish */
    if
    :: drains = 1                                    /* the last finisher drains */
    :: drains = 0
    fi;
    if
    :: drains -> lock_(); drain(); unlock_(); dropSelf()
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
    :: before ->
       release();
       /* the report (drainedOperationReleased) */
       touchQueue();
       lock_();
       releasing--;
       if
       :: releasing == 0 -> wake()
       :: else -> skip
       fi;
       unlock_();
       touchQueue();
       queueRefs--
    :: else -> skip
    fi;
#ifdef MUTANT_TOUCH_AFTER_DONE
    touch()
#else
    skip
#endif
}

proctype Other() {
    bit before, prune, mine, handed;
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
    unlock_();
    dropSelf()
}

init {
    atomic { run Runner(); run Other(); run Other() }
}

/* The program's `waitUntilAllOperationsAreFinished()`: once it returns, the queue holds
 * the operation no more. */
active proctype Waiter() {
    woken -> assert(released == 1)
}

/* When nothing can move, an operation off the list has been released (a list that still
 * links it still holds its reference). */
active proctype Final() {
    timeout -> assert(linked || released == 1);
    assert(!drained || (woken && queueRefs == 0))
}
