/*
 * queue_promotion.pml — a wait on an operation of a narrow queue leaves nothing ahead
 * of it below its class, however the queue's skip races the adds, a class given to an
 * operation ahead and the queue's class lowered (Sources/Spindle/Operations/Internals/
 * Promotion.swift, P2-P3; QueuePromotion.swift: unfinishedAhead, promoteOnAdd,
 * promoteAll, noteOwnClass; QueueMembership.swift, enqueue and registerLocked;
 * Promotion.swift, ownClassChanged; OperationQueue.swift, the queue's class setter).
 *
 * A serial queue of class HI, two operations added in order by one thread: X, then Y.
 * A wait at HI is on Y, so X is what it may wait behind. Four threads race:
 *   the adder (addOperation, twice): claims X's queue word, then under the queue's lock
 *     links X and reads X's flag (`hasOwnPriority`), noting a class of its own
 *     (`ownClassAdded`); then claims and links Y, and (A5) reads Y's floor: when Y
 *     has one, promoteOnAdd walks what is ahead of Y at that floor, as a wait does;
 *   the waiter (Y.finished() at HI): raises Y's floor; if it rose and Y is queued,
 *     walks the queue ahead of Y (unfinishedAhead): under the lock, it skips the queue
 *     when no operation has a class of its own and the queue's class has not been below
 *     HI (`lowestRank`), recording HI (`skippedWaitRank`); otherwise it collects X
 *     unless X's floor is at HI already, and raises what it collected;
 *   the setter (X.qualityOfService = LO): sets X's flag, then reads X's queue word; if
 *     X is queued, notes the class under the lock (noteOwnClass), which returns the
 *     recorded class, and raises X to that class or its own, whichever is higher;
 *   the lowerer (queue.qualityOfService = LO): under the lock sets the class and lowers
 *     `lowestRank`, and reads the record; if the new class is below it, raises every
 *     operation below the record that follows the queue's class or has one of its own
 *     (promoteAll).
 * The setter and the lowerer each may also not act at all, so that neither covers
 * for what the other, or the walk, leaves undone.
 * The setter's flag and the adder's claim form a Dekker pair (the flag, then the word;
 * the claim, then the flag), seq_cst on both sides in the code, and so do the waiter's
 * raise and the adder's claim (P2's pair (a)), which Spin's interleaving of whole
 * steps represents; the mutants below stand for one side reading early.
 *
 * What is checked: once every thread is done, X and Y each run at HI or above: a
 * floor, or their class (X's own once it has one, else the queue's).
 *
 * Not modelled: the walk's stop at a floor already at the wait's class past the first
 * operation ahead (one operation ahead here), and a queue made narrow
 * (promoteOnNarrowing), which reads and records under the lock as the walk does.
 *
 * Mutants (scripts/model-check.sh makes sure each fails):
 *   -DMUTANT_SETTER_READS_EARLY  the setter reads the queue word before it sets the
 *                              flag: the pair with the add broken.
 *   -DMUTANT_ADD_READS_OWN_EARLY the adder reads the flag before its claim: the pair
 *                              broken from the other side.
 *   -DMUTANT_SKIP_IGNORES_OWN  the skip does not look at `ownClassAdded`.
 *   -DMUTANT_NOTE_IGNORES_RECORD the setter raises X to its own class only.
 *   -DMUTANT_NO_LOWER_PROMOTION lowering the queue's class raises nothing.
 *   -DMUTANT_ADD_WALKS_ONLY_ABOVE the add walks ahead only for a class above the
 *                              queue's, not for a floor at it.
 *   -DMUTANT_ADD_NO_RECORD     the add's walk skips without recording.
 */
#define X 0
#define Y 1
#define LO 1
#define HI 4

byte qclass = HI;     /* the queue's class (State.qualityOfService, assignedQoS) */
byte lowest = HI;     /* lowestRank */
bit ownAdded = 0;     /* ownClassAdded */
byte skipped = 0;     /* skippedWaitRank */
bit qlock = 0;
bit word[2];          /* the queue word: claimed */
bit linked[2];
bit own[2];           /* hasOwnPriority; a class of its own is LO */
byte floor[2];        /* promotedRank */
byte done = 0;

inline acquire() { atomic { qlock == 0 -> qlock = 1 } }
inline release() { qlock = 0 }

/* P1: a floor only rises, by CAS. */
inline raise(o, r) {
    atomic { if :: floor[o] < r -> floor[o] = r :: else -> skip fi }
}

/* unfinishedAhead(of: Y, walkRank: r), then the raise of what it collected. */
inline walkAheadOfY(r, record) {
    collect = 0;
    acquire();
#ifdef MUTANT_SKIP_IGNORES_OWN
    if
    :: lowest >= r ->
#else
    if
    :: !ownAdded && lowest >= r ->
#endif
       if :: record && skipped < r -> skipped = r :: else -> skip fi
    :: else ->
       if :: linked[X] && floor[X] < r -> collect = 1 :: else -> skip fi
    fi;
    release();
    if :: collect -> raise(X, r) :: else -> skip fi
}

proctype adder() {
    bit o, collect;
    byte f, rank, aheadRank, qr;
    /* addOperation(X) */
#ifdef MUTANT_ADD_READS_OWN_EARLY
    o = own[X];
#endif
    word[X] = 1;
    acquire();
    linked[X] = 1;
#ifndef MUTANT_ADD_READS_OWN_EARLY
    o = own[X];
#endif
    if :: o -> ownAdded = 1 :: else -> skip fi;
    release();
    /* addOperation(Y): no class of its own, no dependencies. */
    word[Y] = 1;
    acquire(); linked[Y] = 1; release();
    f = floor[Y];                           /* A5's condition */
    if
    :: f != 0 ->                            /* promoteOnAdd */
       qr = qclass;                         /* assignedQoS, outside the lock */
       rank = (floor[Y] > qr -> floor[Y] : qr);
#ifdef MUTANT_ADD_WALKS_ONLY_ABOVE
       aheadRank = (rank > qr -> rank : 0);
#else
       aheadRank = (rank > qr -> rank : floor[Y]);
#endif
       if
       :: aheadRank > 0 ->
#ifdef MUTANT_ADD_NO_RECORD
          walkAheadOfY(aheadRank, 0)
#else
          walkAheadOfY(aheadRank, 1)
#endif
       :: else -> skip
       fi
    :: else -> skip
    fi;
    done++
}

/* Y.finished() from a task at HI: promote(to: HI). */
proctype waiter() {
    bit rose, w, collect;
    atomic { rose = (floor[Y] < HI); if :: rose -> floor[Y] = HI :: else -> skip fi }
    if
    :: rose ->
       w = word[Y];
       if :: w -> walkAheadOfY(HI, 1) :: else -> skip fi
    :: else -> skip
    fi;
    done++
}

/* X.qualityOfService = LO: ownClassChanged. */
proctype setter() {
    bit w;
    byte s, r;
    if :: skip :: goto out fi;              /* it may not happen at all */
#ifdef MUTANT_SETTER_READS_EARLY
    w = word[X];
#endif
    own[X] = 1;
#ifndef MUTANT_SETTER_READS_EARLY
    w = word[X];
#endif
    if
    :: w ->
       acquire(); ownAdded = 1; s = skipped; release();
       r = (floor[X] > LO -> floor[X] : LO);   /* knownRank */
#ifndef MUTANT_NOTE_IGNORES_RECORD
       if :: s > r -> r = s :: else -> skip fi;
#endif
       raise(X, r)                          /* nothing is ahead of X */
    :: else -> skip                         /* no dependencies to promote */
    fi;
out:
    done++
}

/* queue.qualityOfService = LO. */
proctype lowerer() {
    byte s;
    bit cx, cy;
    if :: skip :: goto out fi;
    acquire();
    qclass = LO;
    lowest = LO;                            /* min(lowestRank, LO) */
    s = skipped;
    release();
#ifndef MUTANT_NO_LOWER_PROMOTION
    if
    :: LO < s ->                            /* promoteAll(to: s); qclass < s here */
       acquire();
       cx = linked[X] && floor[X] < s;
       cy = linked[Y] && floor[Y] < s;
       release();
       if :: cx -> raise(X, s) :: else -> skip fi;
       if :: cy -> raise(Y, s) :: else -> skip fi
    :: else -> skip
    fi;
#endif
out:
    done++
}

init {
    atomic { run adder(); run waiter(); run setter(); run lowerer() }
    done == 4;
    assert(floor[Y] >= HI || qclass >= HI);
    assert(floor[X] >= HI || (own[X] -> LO : qclass) >= HI)
}
