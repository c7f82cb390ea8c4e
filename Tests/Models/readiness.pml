/*
 * readiness.pml — an operation's readiness reaching its queue: never lost, never taken
 * twice, and taken back when a dependency is added before it starts (Sources/Spindle/
 * Operations/Internals/Readiness.swift, R1-R4 and R8: evaluateReadiness, signalReady,
 * operationBecameReady, operationBecameUnready; QueueState.swift, the take's
 * `isPassedOver`; QueueMembership.swift, A2-A4: enqueue's register and its look after
 * the lock; Operation.swift, addDependencyEdge; OperationLifecycle.swift, F1-F3).
 *
 * A plain operation B, made by the program, goes into a suspended queue and gets a
 * dependency on A, in either order, and then, or not, a second dependency, on C, while
 * A and C finish and another thread resumes the queue, each at any moment:
 *   the add: the claim (the queue's word set); readiness read before the lock (A2);
 *     under the queue's lock, linked, and if it was ready and not signalled, signalled
 *     and pushed on the ready list, then `takeStartable`; after the lock, if it was not
 *     signalled there and still is not, `evaluateReadiness` (A4);
 *   an edge (`addDependencyEdge`): counted under B's lock (R1), then `hadDependencies`,
 *     then `evaluateReadiness` for B; then `needsFinishLock` on the dependency, and
 *     under its lock, registered unless its finish has begun, in which case B counts it
 *     down itself, and signals itself (`signalReady`) if that was its last;
 *   a dependency's finish: `finishHandled`; if `needsFinishLock`, under its lock, B
 *     counted down under its own lock if registered (F2); then, if that was B's last,
 *     B's `signalReady` (F3, R8): unless signalled, the queue's `operationBecameReady`,
 *     with no look at the count;
 *   `evaluateReadiness`: the signal read first; with the queue named by the word, the
 *     readiness (B's count, under B's lock) against it: ready and not signalled, the
 *     queue's `operationBecameReady` (under its lock: linked and not yet signalled, or
 *     nothing; then pushed and `takeStartable`); not ready and signalled, the queue's
 *     `operationBecameUnready` (under its lock: signalled, not started and on the ready
 *     list, or nothing; then taken off and unsignalled), and if B turned ready again
 *     meanwhile, `operationBecameReady` (R4);
 *   the resume: under the queue's lock, not suspended, then `takeStartable`.
 * `takeStartable` takes B off the ready list unless the queue is suspended, and then,
 * under B's lock, starts it, or, if its count is not zero, passes it over unsignalled
 * (`isPassedOver`, R7).
 *
 * What is checked: B starts at most once; never with a counted dependency unfinished;
 * only after A's finish has begun if it starts after `addDependency` has returned, or
 * was added after it, or was taken back (R1, R3, R4, R8; a start that races an edge's
 * addition may come first, as in Foundation); and when nothing can move, it has
 * started (no readiness lost).
 *
 * Mutants (scripts/model-check.sh makes sure each fails):
 *   -DMUTANT_COUNT_AFTER_REGISTER  the edge is counted after it is registered with A,
 *                                  and so after B's readiness was looked at.
 *   -DMUTANT_NO_LOOK_AFTER_LOCK    the add does not look at readiness again after its
 *                                  lock when it did not signal there.
 *   -DMUTANT_SIGNAL_TWICE          `operationBecameReady` does not check the signal.
 *   -DMUTANT_KEEP_SIGNAL           `operationBecameUnready` takes B back but leaves it
 *                                  signalled.
 *   -DMUTANT_NO_TAKE_CHECK         the take starts B without looking at its count.
 *   -DMUTANT_PASS_OVER_SIGNALLED   the take passes B over but leaves it signalled.
 */
bit qlock = 0, block = 0, alock = 0, clock = 0;
byte unfinished = 0;   /* B's count of unfinished dependencies */
bit hadDeps = 0;       /* B's hadDependencies */
bit claimed = 0;       /* B's queueSync.word names the queue */
bit linked = 0;        /* B's queueFields.linked */
bit signalled = 0;     /* B's queueSync.readySignalled */
bit inReady = 0;       /* B on the queue's ready list */
bit started = 0;
bit suspended = 1;
bit aHandled = 0;      /* A's finishHandled */
bit aNeedsLock = 0;    /* A's needsFinishLock */
bit registered = 0;    /* B in A's dependents */
bit cHandled = 0;      /* C's finishHandled */
bit cNeedsLock = 0;    /* C's needsFinishLock */
bit cRegistered = 0;   /* B in C's dependents */
bit edgeFirst = 0;     /* ghost: the program added the edge, then B */
bit takenBack = 0;     /* ghost: the queue took B back */
bit edgeDone = 0;      /* ghost: addDependency has returned */

inline lock(l) { atomic { l == 0 -> l = 1 } }
inline unlock(l) { l = 0 }

/* Under the queue's lock. */
inline takeStartable() {
    if
    :: !suspended && inReady ->
       inReady = 0;
#ifdef MUTANT_NO_TAKE_CHECK
       if
       :: true ->
#else
       lock(block);                                  /* isPassedOver, R7 */
       if
       :: unfinished > 0 ->
#ifndef MUTANT_PASS_OVER_SIGNALLED
          signalled = 0
#else
          skip
#endif
       :: else ->
#endif
          assert(!started);                          /* once */
          assert(unfinished == 0);                   /* no counted dependency unfinished */
          assert(!(edgeFirst || takenBack || edgeDone) || aHandled);  /* not before A */
          started = 1
       fi;
#ifndef MUTANT_NO_TAKE_CHECK
       unlock(block)
#else
       skip
#endif
    :: else -> skip
    fi
}

inline becameReady() {
    lock(qlock);
#ifdef MUTANT_SIGNAL_TWICE
    if
    :: linked -> signalled = 1; inReady = 1; takeStartable()
    :: else -> skip
    fi;
#else
    if
    :: linked && !signalled -> signalled = 1; inReady = 1; takeStartable()
    :: else -> skip
    fi;
#endif
    unlock(qlock)
}

/* `back`: the caller's local. */
inline becameUnready() {
    lock(qlock);
    back = linked && signalled && !started && inReady;
    if
    :: back ->
       inReady = 0;
#ifndef MUTANT_KEEP_SIGNAL
       signalled = 0;
#endif
       takenBack = 1
    :: else -> skip
    fi;
    unlock(qlock)
}

/* The caller's locals: sl, rdy, back. */
inline evaluateReadiness() {
    sl = signalled;
    if
    :: sl && !hadDeps -> skip
    :: else ->
       if
       :: claimed ->                                 /* withPinnedQueue */
          lock(block); rdy = (unfinished == 0); unlock(block);
          if
          :: rdy == sl -> skip
          :: rdy && !sl -> becameReady()
          :: !rdy && sl ->
             becameUnready();
             if
             :: back ->
                lock(block); rdy = (unfinished == 0); unlock(block);
                if
                :: rdy -> becameReady()
                :: else -> skip
                fi
             :: else -> skip
             fi
          fi
       :: else -> skip
       fi
    fi
}

inline add() {
    claimed = 1;
    lock(block); ready0 = (unfinished == 0); unlock(block);      /* A2 */
    lock(qlock);                                                  /* A3 */
    linked = 1;
    becomes = ready0 && !signalled;
    if
    :: becomes -> signalled = 1; inReady = 1; takeStartable()
    :: else -> skip
    fi;
    unlock(qlock);
#ifndef MUTANT_NO_LOOK_AFTER_LOCK
    if
    :: !becomes && !signalled -> evaluateReadiness()             /* A4 */
    :: else -> skip
    fi
#endif
}

/* R8: a plain operation whose count reached zero. The caller's local: sl. */
inline signalReady() {
    sl = signalled;
    if
    :: !sl && claimed -> becameReady()
    :: else -> skip
    fi
}

inline addEdge() {
#ifndef MUTANT_COUNT_AFTER_REGISTER
    lock(block); unfinished++; unlock(block);                     /* R1 */
#endif
    hadDeps = 1;
    evaluateReadiness();
    aNeedsLock = 1;
    lock(alock);
    reg = !aHandled;
    if
    :: reg -> registered = 1
    :: else -> skip
    fi;
    unlock(alock);
#ifdef MUTANT_COUNT_AFTER_REGISTER
    lock(block); unfinished++; unlock(block);
#endif
    if
    :: !reg ->                                                    /* dependencyFinished */
       lock(block); unfinished--; rdy = (unfinished == 0); unlock(block);
       if
       :: rdy -> signalReady()
       :: else -> skip
       fi
    :: else -> skip
    fi;
    edgeDone = 1
}

/* The second edge, on C, as `addEdge`. */
inline addEdgeC() {
    lock(block); unfinished++; unlock(block);
    hadDeps = 1;
    evaluateReadiness();
    cNeedsLock = 1;
    lock(clock);
    reg = !cHandled;
    if
    :: reg -> cRegistered = 1
    :: else -> skip
    fi;
    unlock(clock);
    if
    :: !reg ->
       lock(block); unfinished--; rdy = (unfinished == 0); unlock(block);
       if
       :: rdy -> signalReady()
       :: else -> skip
       fi
    :: else -> skip
    fi
}

proctype Program() {
    bit sl, rdy, back, ready0, becomes, reg;
    if
    :: edgeFirst = 1; addEdge(); add()
    :: add(); addEdge()
    fi;
    /* Or no second edge, whose finish would signal again what the first lost. */
    if
    :: addEdgeC()
    :: skip
    fi
}

proctype FinishA() {
    bit sl, rdy, back, told = 0;
    aHandled = 1;                                    /* F1 */
    if
    :: aNeedsLock ->
       lock(alock);                                  /* F2 */
       if
       :: registered ->
          lock(block); unfinished--; told = (unfinished == 0); unlock(block)
       :: else -> skip
       fi;
       unlock(alock)
    :: else -> skip
    fi;
    if
    :: told -> signalReady()                         /* F3, R8 */
    :: else -> skip
    fi
}

proctype FinishC() {
    bit sl, told = 0;
    cHandled = 1;
    if
    :: cNeedsLock ->
       lock(clock);
       if
       :: cRegistered ->
          lock(block); unfinished--; told = (unfinished == 0); unlock(block)
       :: else -> skip
       fi;
       unlock(clock)
    :: else -> skip
    fi;
    if
    :: told -> signalReady()
    :: else -> skip
    fi
}

proctype Resume() {
    lock(qlock);
    suspended = 0;
    takeStartable();
    unlock(qlock)
}

init {
    atomic { run Program(); run FinishA(); run FinishC(); run Resume() }
}

/* No readiness lost: when nothing can move, B has started. */
active proctype Final() {
    timeout -> assert(started)
}
