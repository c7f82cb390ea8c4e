/*
 * promotion_walk.pml — what a higher class waits for rises to it, however the walk
 * races the graph being built (Sources/Spindle/Operations/Internals/Promotion.swift,
 * P1-P3: raiseFloor, raiseFloors, promoteDependencies, promoteOnAdd; Operation.swift,
 * addDependencyEdge and knownRank; QueueMembership.swift, enqueue's claim and A5).
 *
 * Three operations, X -> Y -> Z (X depends on Y, Y on Z), classes 0 (unknown) and 5.
 * X is queued and depends on Y from the start. Three threads race:
 *   the promoter (a wait on X at class 5: promote): the walk of P2, a work list from X.
 *     For each operation: raise its floor (P1; an operation already at 5 is skipped:
 *     P2's stop); then, if it has had a dependency (`hadDependencies`) and is in a
 *     queue (its queue word), read its dependencies under its lock and visit each. An
 *     operation in no queue keeps its dependencies for its add.
 *   the edge (Y.addDependency(Z): addDependencyEdge): appends Z under Y's lock, sets
 *     `hadDependencies`, then promotes Z to Y's known class (knownRank: its queue's
 *     class, 0 here, or its floor if higher).
 *   the add (queue.addOperation(Y): enqueue): claims Y's queue word, reads
 *     `hadDependencies` and the floor to decide whether A5 applies, then (promoteOnAdd,
 *     promoteDependencies) reads the flag again and the floor, and promotes each
 *     dependency it reads under Y's lock to that floor.
 * Each promotion of a dependency by the edge or the add is itself a walk from there
 * (`promote`), which for Z, with no dependencies, is its floor.
 *
 * Two Dekker pairs make this work, seq_cst on all four sides in the code, which Spin's
 * interleaving of whole steps represents:
 *   (a) the walk raises Y's floor, then reads Y's queue word; the add claims the word,
 *       then reads the floor: the walk goes on to Y's dependencies, or the add brings
 *       them up to the floor;
 *   (b) the walk raises Y's floor, then reads `hadDependencies`; the edge sets it,
 *       then reads the floor: the walk reads the list (and finds Z, appended before
 *       the flag), or the edge promotes Z to the floor.
 * Each mutant below stands for one side reading early, which a weaker ordering would
 * allow.
 *
 * What is checked: once every thread is done, for each edge a -> b whose dependent a
 * is in a queue, b's floor is at least a's: nothing a queued operation of class 5
 * waits for is left below it. (An operation in no queue cannot start, and its add
 * promotes its dependencies then.)
 *
 * Mutants (scripts/model-check.sh makes sure each fails):
 *   -DMUTANT_ADD_READS_EARLY   the add reads the floor before its claim: (a) broken.
 *   -DMUTANT_WALK_READS_QUEUE_EARLY  the walk reads the queue word before it raises
 *                              the floor: (a) broken from the other side.
 *   -DMUTANT_EDGE_READS_EARLY  the edge reads Y's class before it sets the flag: (b).
 *   -DMUTANT_EDGE_OWN_CLASS    the edge promotes to Y's own class only, not its floor.
 *   -DMUTANT_NO_ADD_PROMOTION  the add promotes nothing (A5 left out: the walk alone
 *                              would have to see Y queued).
 */
#define X 0
#define Y 1
#define Z 2

byte floor[3];        /* promotedRank */
bit queued[3];        /* the queue word is set */
bit had[3];           /* hadDependencies */
bit edgeXY = 1;       /* X depends on Y, from the start */
bit edgeYZ = 0;       /* Y depends on Z, once the edge has appended it */
bit lock[3];          /* each operation's lock (its dependency list) */
byte done = 0;

inline acquire(o) { atomic { lock[o] == 0 -> lock[o] = 1 } }
inline release(o) { lock[o] = 0 }

/* `promote(to: r)` on an operation with no dependency list this model reaches (Z): its
 * floor, by CAS, only up (P1). */
inline raise(o, r) {
    atomic { if :: floor[o] < r -> floor[o] = r :: else -> skip fi }
}

/* P2's walk from X at class 5. The work list holds at most Y and Z here: two bits. */
proctype promoter() {
    bit visitY = 0, visitZ = 0;
    bit rose, q, h, d;
    /* X: queued from the start, and it has had a dependency. */
    atomic { rose = (floor[X] < 5); if :: rose -> floor[X] = 5 :: else -> skip fi }
    if
    :: rose ->
       acquire(X); d = edgeXY; release(X);
       if :: d -> visitY = 1 :: else -> skip fi
    :: else -> skip
    fi;
    if
    :: visitY ->
#ifdef MUTANT_WALK_READS_QUEUE_EARLY
       q = queued[Y];
#endif
       atomic { rose = (floor[Y] < 5); if :: rose -> floor[Y] = 5 :: else -> skip fi }
       if
       :: rose ->
          h = had[Y];
#ifndef MUTANT_WALK_READS_QUEUE_EARLY
          q = queued[Y];
#endif
          if
          :: h && q ->
             acquire(Y); d = edgeYZ; release(Y);
             if :: d -> visitZ = 1 :: else -> skip fi
          :: else -> skip
          fi
       :: else -> skip
       fi
    :: else -> skip
    fi;
    if
    :: visitZ -> raise(Z, 5)
    :: else -> skip
    fi;
    done++
}

/* Y.addDependency(Z). */
proctype edge() {
    byte known;
    acquire(Y); edgeYZ = 1; release(Y);
#ifdef MUTANT_EDGE_READS_EARLY
    known = floor[Y];
#endif
    had[Y] = 1;
#ifndef MUTANT_EDGE_READS_EARLY
#ifdef MUTANT_EDGE_OWN_CLASS
    known = 0;
#else
    known = floor[Y];                 /* knownRank: Y's queue class is 0 here */
#endif
#endif
    /* Registering with Z succeeds (Z never finishes here); then Z.promote(to: known). */
    raise(Z, known);
    done++
}

/* queue.addOperation(Y). */
proctype add() {
    byte r, f;
    bit d, h;
#ifdef MUTANT_ADD_READS_EARLY
    r = floor[Y];
#endif
    queued[Y] = 1;                    /* the claiming CAS on the queue word */
    h = had[Y];                       /* `noDependencies` */
    f = floor[Y];                     /* A5's condition: dependencies, or a floor */
#ifndef MUTANT_NO_ADD_PROMOTION
    if
    :: h || f != 0 ->
       if
       :: had[Y] ->                   /* promoteOnAdd -> promoteDependencies */
#ifndef MUTANT_ADD_READS_EARLY
          r = floor[Y];               /* max(known, floor): Y's queue class is 0 */
#endif
          acquire(Y); d = edgeYZ; release(Y);
          if :: d -> raise(Z, r) :: else -> skip fi
       :: else -> skip
       fi
    :: else -> skip
    fi;
#endif
    done++
}

init {
    queued[X] = 1; had[X] = 1;
    atomic { run promoter(); run edge(); run add() }
    done == 3;
    /* X is what the class-5 waiter waits on. */
    assert(floor[X] == 5);
    assert(!(queued[X] && edgeXY) || floor[Y] >= floor[X]);
    assert(!(queued[Y] && edgeYZ) || floor[Z] >= floor[Y])
}
