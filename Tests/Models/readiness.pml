/*
 * readiness.pml — an operation's readiness reaching its queue: never lost, never taken
 * twice, and taken back when a dependency is added before it starts (Sources/Spindle/
 * Operations/Internals/Readiness.swift, R1-R4, R8 and R9: evaluateReadiness,
 * signalReady, operationBecameReady, operationBecameUnready; QueueState.swift, the take's
 * `isPassedOver`; QueueMembership.swift, A2-A4: enqueue's register and its look after
 * the lock; Readiness.swift, addDependencyEdge and the barrier's edge;
 * OperationLifecycle.swift, F1-F3).
 *
 * A plain operation B, made by the program, goes into a suspended queue and gets a
 * dependency on A, in either order, and then, or not, a second dependency, on C, while
 * A and C finish and another thread resumes the queue, each at any moment:
 *   the add: the claim (the queue's word set); `hadDependencies` read; under the
 *     queue's lock, linked, its readiness read if it has had a dependency (its count,
 *     under B's lock: A2), and if it was ready and not signalled, signalled and pushed
 *     on the ready list, then `takeStartable`; nothing after the lock (A4);
 *   an edge (`addDependencyEdge`): counted under B's lock (R1), then `hadDependencies`,
 *     then `evaluateReadiness` for B; then `needsFinishLock` on the dependency, and
 *     under its lock, registered unless its finish has begun, in which case B counts it
 *     down itself, and signals itself (`signalReady`) if that was its last;
 *   a dependency's finish: `finishHandled`; if `needsFinishLock`, under its lock, B
 *     counted down under its own lock if registered (F2); then, if that was B's last,
 *     B's `signalReady` (F3, R8): unless signalled, the queue's `operationBecameReady`,
 *     with no look at the count;
 *   `signalReady`, and the signal of a dependency found finished by its edge: the same;
 *   `evaluateReadiness`: the signal read first; with the queue named by the word, the
 *     readiness (cancelled, or B's count under B's lock) against it: ready and not
 *     signalled, the queue's `operationBecameReady` (under its lock: linked and not
 *     yet signalled, or nothing; then pushed and `takeStartable`); not ready and
 *     signalled, the queue's `operationBecameUnready` (under its lock: signalled, not
 *     started and on the ready list, or nothing; then taken off and unsignalled), and
 *     if B turned ready again meanwhile, `operationBecameReady` (R4);
 *   the resume: under the queue's lock, not suspended, then `takeStartable`;
 *   a cancellation, or none: the flag, then `evaluateReadiness` (cancelled, B is ready
 *     whatever its count: R6).
 * `takeStartable` takes B off the ready list unless the queue is suspended, and then,
 * under B's lock, starts it, or, if it is not cancelled and its count is not zero,
 * passes it over unsignalled (`isPassedOver`, R7).
 *
 * What is checked: B starts at most once; unless cancelled, never with a counted
 * dependency unfinished, and only after A's finish has begun if it starts after
 * `addDependency` has returned, or was added after it, or was taken back (R1, R3, R4,
 * R8; a start that races an edge's addition may come first, as in Foundation); and
 * when nothing can move, it has started (no readiness lost).
 *
 * -DVARIANT_SUBCLASS (must pass too): B is of a subclass, whose readiness is its
 * `isReady` (here its count, as `super.isReady` gives): the add reads it before the
 * lock (A2) and looks again after the lock if it did not signal there (A4); a
 * dependency's finish evaluates it (`didChangeValue`, then `evaluateReadiness`); the
 * take does not look at the count (R7); no second dependency: a subclass's edge that
 * races the last count-down's signal may come after it, as with Foundation, whose
 * queue reads `isReady` when it schedules.
 *
 * -DVARIANT_BARRIER (must pass too): B is added behind a barrier X, pending at first,
 * whose finish can come at any moment (Readiness.swift, R9). Under the queue's lock the
 * add finds X not finished, counts B's edge to it under B's lock, and does not signal
 * B; after the lock it evaluates B's readiness and registers the edge with X, or
 * counts it down itself if X's finish has begun. What is checked besides: unless
 * cancelled, B never starts before X's finish has begun. No second dependency: X is
 * one already.
 *
 * Mutants (scripts/model-check.sh makes sure each fails):
 *   -DMUTANT_COUNT_AFTER_REGISTER  an edge is counted after it is registered with its
 *                                  dependency, and so after B's readiness was looked at.
 *   -DMUTANT_READ_BEFORE_LOCK      the add reads a plain operation's count before its
 *                                  lock, with no second look after it.
 *   -DMUTANT_SUBCLASS_NO_LOOK      with VARIANT_SUBCLASS, the add does not look at
 *                                  readiness again after its lock when it did not
 *                                  signal there.
 *   -DMUTANT_SIGNAL_TWICE          `operationBecameReady` does not check the signal.
 *   -DMUTANT_KEEP_SIGNAL           `operationBecameUnready` takes B back but leaves it
 *                                  signalled.
 *   -DMUTANT_NO_TAKE_CHECK         the take starts B without looking at its count.
 *   -DMUTANT_PASS_OVER_SIGNALLED   the take passes B over but leaves it signalled.
 *   -DMUTANT_BARRIER_EDGE_AFTER_LOCK  with VARIANT_BARRIER, the edge to X is counted
 *                                  after the queue's lock, as any other edge is.
 */
#ifdef MUTANT_SUBCLASS_NO_LOOK
#define VARIANT_SUBCLASS
#endif
#ifdef MUTANT_BARRIER_EDGE_AFTER_LOCK
#define VARIANT_BARRIER
#endif

bit qlock = 0, block = 0, alock = 0, clock = 0;
byte unfinished = 0;   /* B's count of unfinished dependencies */
bit hadDeps = 0;       /* B's hadDependencies */
bit claimed = 0;       /* B's queueSync.word names the queue */
bit linked = 0;        /* B's queueFields.linked */
bit signalled = 0;     /* B's queueSync.readySignalled */
bit inReady = 0;       /* B on the queue's ready list */
bit started = 0;
bit suspended = 1;
bit cancelled = 0;     /* B's cancelledFlag */
bit aHandled = 0;      /* A's finishHandled */
bit aNeedsLock = 0;    /* A's needsFinishLock */
bit registered = 0;    /* B in A's dependents */
bit cHandled = 0;      /* C's finishHandled */
bit cNeedsLock = 0;    /* C's needsFinishLock */
bit cRegistered = 0;   /* B in C's dependents */
bit edgeFirst = 0;     /* ghost: the program added the edge, then B */
bit takenBack = 0;     /* ghost: the queue took B back */
bit edgeDone = 0;      /* ghost: addDependency has returned */
bit xlock = 0;         /* VARIANT_BARRIER: X's lock */
bit xHandled = 0;      /* X's finishHandled */
bit xNeedsLock = 0;    /* X's needsFinishLock */
bit xRegistered = 0;   /* B in X's dependents */
bit behind = 0;        /* ghost: the add found X pending */

inline lock(l) { atomic { l == 0 -> l = 1 } }
inline unlock(l) { l = 0 }

/* Under the queue's lock. */
inline takeStartable() {
    if
    :: !suspended && inReady ->
       inReady = 0;
#if defined(MUTANT_NO_TAKE_CHECK) || defined(VARIANT_SUBCLASS)
       if
       :: true ->
#else
       lock(block);                                  /* isPassedOver, R7 */
       if
       :: unfinished > 0 && !cancelled ->
#ifndef MUTANT_PASS_OVER_SIGNALLED
          signalled = 0
#else
          skip
#endif
       :: else ->
#endif
          assert(!started);                          /* once */
#ifndef VARIANT_SUBCLASS
          assert(cancelled || unfinished == 0);      /* no counted dependency unfinished */
#endif
          assert(cancelled || !(edgeFirst || takenBack || edgeDone) || aHandled);  /* not before A */
          assert(cancelled || !behind || xHandled);                                /* not before X */
          started = 1
       fi;
#if !defined(MUTANT_NO_TAKE_CHECK) && !defined(VARIANT_SUBCLASS)
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
          lock(block); rdy = cancelled || (unfinished == 0); unlock(block);
          if
          :: rdy == sl -> skip
          :: rdy && !sl -> becameReady()
          :: !rdy && sl ->
             becameUnready();
             if
             :: back ->
                lock(block); rdy = cancelled || (unfinished == 0); unlock(block);
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
#ifdef VARIANT_SUBCLASS
    lock(block); ready0 = (unfinished == 0); unlock(block);      /* A2: count, then isReady */
#else
    hd = hadDeps;
#ifdef MUTANT_READ_BEFORE_LOCK
    ready0 = 1;
    if
    :: hd -> lock(block); ready0 = (unfinished == 0); unlock(block); ready0 = ready0 || cancelled
    :: else -> skip
    fi;
#endif
#endif
    lock(qlock);                                                  /* A3 */
    linked = 1;
#if !defined(VARIANT_SUBCLASS) && !defined(MUTANT_READ_BEFORE_LOCK)
    ready0 = 1;
    if
    :: hd -> lock(block); ready0 = (unfinished == 0); unlock(block); ready0 = ready0 || cancelled  /* A2 */
    :: else -> skip
    fi;
#endif
#ifdef VARIANT_BARRIER
    bb = !xHandled;                                               /* X pending */
    if
    :: bb ->
       behind = 1;
#ifndef MUTANT_BARRIER_EDGE_AFTER_LOCK
       lock(block); unfinished++; unlock(block); hadDeps = 1      /* R9 */
#else
       skip
#endif
    :: else -> skip
    fi;
#endif
    becomes = ready0 && !signalled && !bb;
    if
    :: becomes -> signalled = 1; inReady = 1; takeStartable()
    :: else -> skip
    fi;
    unlock(qlock);
#ifdef VARIANT_BARRIER
    if
    :: bb ->                                                      /* completeBarrierEdge */
#ifdef MUTANT_BARRIER_EDGE_AFTER_LOCK
       lock(block); unfinished++; unlock(block); hadDeps = 1;
#endif
       evaluateReadiness();
       registerEdgeWith(xlock, xHandled, xNeedsLock, xRegistered)
    :: else -> skip
    fi;
#endif
#if defined(VARIANT_SUBCLASS) && !defined(MUTANT_SUBCLASS_NO_LOOK)
    if
    :: !becomes && !signalled -> evaluateReadiness()             /* A4 */
    :: else -> skip
    fi
#endif
}

/* R8: a plain operation whose count reached zero. The caller's locals: sl (and rdy,
 * back for a subclass, which evaluates its readiness instead). */
inline signalReady() {
#ifdef VARIANT_SUBCLASS
    evaluateReadiness()
#else
    sl = signalled;
    if
    :: !sl && claimed -> becameReady()
    :: else -> skip
    fi
#endif
}

/* An edge from B to a dependency: its lock, its finishHandled, its needsFinishLock and
 * whether B is in its dependents. */
inline addEdgeTo(dlock, dHandled, dNeedsLock, dRegistered) {
#ifndef MUTANT_COUNT_AFTER_REGISTER
    lock(block); unfinished++; unlock(block);                     /* R1 */
#endif
    hadDeps = 1;
    evaluateReadiness();
    registerEdgeWith(dlock, dHandled, dNeedsLock, dRegistered)
}

/* A counted edge registered with its dependency, or counted down at once if the
 * dependency's finish has begun (`registerEdge`). */
inline registerEdgeWith(dlock, dHandled, dNeedsLock, dRegistered) {
    dNeedsLock = 1;
    lock(dlock);
    reg = !dHandled;
    if
    :: reg -> dRegistered = 1
    :: else -> skip
    fi;
    unlock(dlock);
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
    fi
}

inline addEdge() {
    addEdgeTo(alock, aHandled, aNeedsLock, registered);
    edgeDone = 1
}

proctype Program() {
    bit sl, rdy, back, ready0, becomes, reg, hd, bb = 0;
    if
    :: edgeFirst = 1; addEdge(); add()
    :: add(); addEdge()
    fi;
#if !defined(VARIANT_SUBCLASS) && !defined(VARIANT_BARRIER)
    /* Or no second edge, whose finish would signal again what the first lost. */
    if
    :: addEdgeTo(clock, cHandled, cNeedsLock, cRegistered)
    :: skip
    fi
#endif
}

/* A dependency's finish: its lock, its finishHandled, its needsFinishLock and whether B
 * is in its dependents. The caller's locals: sl, rdy, back, told. */
inline finishDependency(dlock, dHandled, dNeedsLock, dRegistered) {
    dHandled = 1;                                    /* F1 */
    if
    :: dNeedsLock ->
       lock(dlock);                                  /* F2 */
       if
       :: dRegistered ->
          lock(block); unfinished--; told = (unfinished == 0); unlock(block)
       :: else -> skip
       fi;
       unlock(dlock)
    :: else -> skip
    fi;
    if
    :: told -> signalReady()                         /* F3, R8 */
    :: else -> skip
    fi
}

proctype FinishA() {
    bit sl, rdy, back, told = 0;
    finishDependency(alock, aHandled, aNeedsLock, registered)
}

#ifdef VARIANT_BARRIER
proctype FinishX() {
    bit sl, rdy, back, told = 0;
    finishDependency(xlock, xHandled, xNeedsLock, xRegistered)
}
#endif

proctype FinishC() {
    bit sl, rdy, back, told = 0;
    finishDependency(clock, cHandled, cNeedsLock, cRegistered)
}

/* `cancel()`: the flag, then `evaluateReadiness`. */
proctype Cancel() {
    bit sl, rdy, back;
    cancelled = 1;
    evaluateReadiness()
}

proctype Resume() {
    lock(qlock);
    suspended = 0;
    takeStartable();
    unlock(qlock)
}

init {
    atomic {
        run Program(); run FinishA(); run FinishC(); run Resume();
#ifdef VARIANT_BARRIER
        run FinishX();
#endif
        if
        :: run Cancel()
        :: skip
        fi
    }
}

/* No readiness lost: when nothing can move, B has started. */
active proctype Final() {
    timeout -> assert(started)
}
