/*
 * dependent_lifetime.pml — a finishing dependency never retains a dependent that has
 * begun its deinit (Sources/Spindle/Operations/Internals/OperationLifecycle.swift,
 * `countDownOneEdge` and F2's lock in `finishProtocol`; Dependents.swift).
 *
 * Operation A finishes while D, queued and depending on A, is cancelled. A cancelled
 * operation is ready whatever its dependencies, so D can start, finish and be let go by
 * its queue while A is still counting it down. Every flag access is sequentially
 * consistent, as Spin's interleaving is; `lockA` and `lockD` are the operations' locks.
 *   dependency (A's F2): under A's lock, if D is still registered: under D's lock, D's
 *     count goes down, and if that was the last dependency and D has not begun to
 *     finish, D is retained. Then, if retained, D is told it is ready (F3) and
 *     released.
 *   canceller: D's `cancel()`.
 *   runner (D's queue): starts D once it is cancelled or told it is ready; D's finish
 *     claims F1, passes through D's lock (D has a dependency), and is counted done.
 *   list (the queue's list): releases its reference to D once D is done.
 *   user: the program's own reference to D, dropped at any point.
 * Whoever brings D's reference count to zero runs D's deinit: it takes D off A's
 * dependents under A's lock; D is freed after.
 *
 * What is checked: nobody retains or touches D once its deinit has begun; when nothing
 * can move, D has finished and been freed.
 *
 * Mutants (scripts/model-check.sh makes sure each fails):
 *   -DMUTANT_TEST_OUTSIDE_LOCK  A tests D's state and retains it after leaving D's lock.
 *   -DMUTANT_NO_FINISH_LOCK     D's finish does not pass through its lock.
 */
bit lockA = 0, lockD = 0;
bit registered = 1;    /* D in A's dependents */
byte unfinished = 1;   /* D's count of unfinished dependencies */
bit queued = 1;        /* D's queueSync.word != 0 */
bit handled = 0;       /* D's finishHandled */
bit cancelled = 0;
bit told = 0;          /* D was told it is ready */
bit done = 0;          /* D's queue counted it finished */
byte refs = 2;         /* the queue's list and the user */
bit deiniting = 0;
bit freed = 0;

inline lock(l) { atomic { l == 0 -> l = 1 } }
inline unlock(l) { l = 0 }

/* Drops one reference; the thread that drops the last runs D's deinit. */
inline release_d() {
    atomic { assert(!deiniting); refs--; if :: refs == 0 -> deiniting = 1; last = 1 :: else -> skip fi };
    if
    :: last ->
       lock(lockA);
       registered = 0;
       unlock(lockA);
       freed = 1
    :: else -> skip
    fi
}

proctype dependency() {
    bit retained = 0, last = 0, zero = 0;
    lock(lockA);
    if
    :: registered ->
       lock(lockD);
       unfinished--;
       zero = (unfinished == 0);
#ifdef MUTANT_TEST_OUTSIDE_LOCK
       unlock(lockD);
#endif
       if
       :: zero && queued && !handled -> atomic { assert(!deiniting); refs++ }; retained = 1
       :: else -> skip
       fi;
#ifndef MUTANT_TEST_OUTSIDE_LOCK
       unlock(lockD);
#endif
       registered = 0
    :: else -> skip
    fi;
    unlock(lockA);
    if
    :: retained ->
       assert(!deiniting);  /* F3 touches D */
       told = 1;
       release_d()
    :: else -> skip
    fi
}

proctype canceller() {
    cancelled = 1
}

proctype runner() {
    bit won = 0;
    (cancelled || told);
    assert(!freed);
    atomic { if :: handled == 0 -> handled = 1; won = 1 :: else -> skip fi };
    if
    :: won ->
#ifndef MUTANT_NO_FINISH_LOCK
       lock(lockD);
       unlock(lockD);
#endif
       done = 1
    :: else -> skip
    fi
}

proctype list() {
    bit last = 0;
    done;
    release_d()
}

proctype user() {
    bit last = 0;
    release_d()
}

init {
    atomic { run dependency(); run canceller(); run runner(); run list(); run user() }
}

active proctype watchdog() {
    timeout -> assert(handled && freed && refs == 0)
}
