/*
 * finish_protocol.pml — an operation's finish runs once, and neither a dependent that
 * registers nor a thread that waits while it finishes is left behind
 * (Sources/Spindle/Operations/Internals/OperationLifecycle.swift, F1, F2, F3, F6 and the
 * two Dekker pairs at its top; Operation.swift, addDependencyEdge and
 * waitUntilFinished).
 *
 * Operation A finishes while operation D makes itself depend on A and a thread waits
 * for A. Every flag access is sequentially consistent in the code, as Spin's
 * interleaving is; `lockA` and `lockD` are the operations' locks.
 *   finisher (finishProtocol), on two paths at once (the end of start() and a queue
 *     retiring it): F1, a CAS of `handled`, and only the winner goes on; F2, only if
 *     `needs_lock`: under A's lock, each registered dependent is counted down under its
 *     own lock and collected when that was its last dependency; F3, those are told they
 *     are ready; F6, `completed` is stored, then, only if `has_waiters`, the waiters are
 *     taken under A's lock and released.
 *   dependent (addDependencyEdge): D counts the edge (under D's lock), stores
 *     `needs_lock`, then under A's lock registers unless A's `handled` is set; if it was
 *     set, D counts the edge off itself (dependencyFinished).
 *   waiter (waitUntilFinished): stores `has_waiters`, then under A's lock registers
 *     unless `completed` is set, and sleeps until released.
 *
 * What is checked: the protocol's body runs once; when nothing can move, D's count is
 * back to zero and D was told it is ready exactly once, and the waiter is not asleep.
 *
 * Mutants (scripts/model-check.sh makes sure each fails):
 *   -DMUTANT_NO_CAS              both finish paths run the body.
 *   -DMUTANT_FLAG_AFTER_REGISTER D stores `needs_lock` after it registered.
 *   -DMUTANT_WAITER_FLAG_LATE    the waiter stores `has_waiters` after it registered.
 *   -DMUTANT_COMPLETED_LATE      the finisher reads `has_waiters` before it stores
 *                                `completed`.
 */
bit lockA = 0, lockD = 0;
bit handled = 0;       /* finishHandled */
bit needs_lock = 0;    /* needsFinishLock */
bit completed = 0;     /* finishCompleted */
bit has_waiters = 0;   /* hasWaiters */
bit registered_dep = 0;/* D in A's dependents */
bit registered_wait = 0;
bit released = 0;      /* the waiter's latch */
bit asleep = 0;
byte d_unfinished = 0; /* D's count of unfinished dependencies */
byte d_told = 0;       /* times D was told it became ready */
byte bodies = 0;       /* finish bodies run */

inline lock(l) { atomic { l == 0 -> l = 1 } }
inline unlock(l) { l = 0 }

proctype finisher() {
    bit won = 0, ready = 0, take = 0, wake = 0;
    /* F1 */
#ifdef MUTANT_NO_CAS
    won = 1;
#else
    atomic { if :: handled == 0 -> handled = 1; won = 1 :: else -> skip fi }
#endif
    if :: !won -> goto end_f :: else -> skip fi;
    handled = 1;
    bodies++;
    assert(bodies == 1);
    /* F2 */
    if
    :: needs_lock ->
       lock(lockA);
       if
       :: registered_dep ->
          lock(lockD);
          d_unfinished--;
          ready = (d_unfinished == 0);
          unlock(lockD);
          registered_dep = 0
       :: else -> skip
       fi;
       unlock(lockA)
    :: else -> skip
    fi;
    /* F3 */
    if :: ready -> d_told++ :: else -> skip fi;
    /* F6 */
#ifdef MUTANT_COMPLETED_LATE
    take = has_waiters;
    completed = 1;
#else
    completed = 1;
    take = has_waiters;
#endif
    if
    :: take ->
       lock(lockA);
       wake = registered_wait;
       registered_wait = 0;
       unlock(lockA);
       if :: wake -> released = 1 :: else -> skip fi
    :: else -> skip
    fi;
end_f:
    skip
}

proctype dependent() {
    bit registered = 0, ready = 0;
    lock(lockD);
    d_unfinished++;
    unlock(lockD);
#ifndef MUTANT_FLAG_AFTER_REGISTER
    needs_lock = 1;
#endif
    lock(lockA);
    if
    :: !handled -> registered_dep = 1; registered = 1
    :: else -> skip
    fi;
    unlock(lockA);
#ifdef MUTANT_FLAG_AFTER_REGISTER
    needs_lock = 1;
#endif
    if
    :: !registered ->            /* dependencyFinished */
       lock(lockD);
       d_unfinished--;
       ready = (d_unfinished == 0);
       unlock(lockD);
       if :: ready -> d_told++ :: else -> skip fi
    :: else -> skip
    fi
}

proctype waiter() {
    bit registered = 0;
#ifndef MUTANT_WAITER_FLAG_LATE
    has_waiters = 1;
#endif
    lock(lockA);
    if
    :: !completed -> registered_wait = 1; registered = 1
    :: else -> skip
    fi;
    unlock(lockA);
#ifdef MUTANT_WAITER_FLAG_LATE
    has_waiters = 1;
#endif
    if
    :: registered -> asleep = 1; released == 1; asleep = 0
    :: else -> skip
    fi
}

init {
    atomic { run finisher(); run finisher(); run dependent(); run waiter() }
}

active proctype watchdog() {
    timeout -> assert(!asleep && d_unfinished == 0 && d_told == 1)
}
