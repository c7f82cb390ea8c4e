/*
 * promotion.pml — a promoted operation never waits at a lower class, runs once, and
 * leaves every thread at its own class (Sources/Spindle/Operations/Internals/
 * Promotion.swift, P4-P7, and its raiseFloor; PromotionRun.swift, promoteRun,
 * boostRunningLocked, submitCopy, claimRun, endRun, endBoost; ChainRunner.swift,
 * submit and runChain).
 *
 * One operation of class 1 (background) and two promoters, to classes 4 and 5, which
 * race its dispatch and its run. Its run is one word, `execWord` (P4): `st` (IDLE,
 * SUBMITTED, MOVED, RUNNING, DONE), the class it is at (`at`; `sub`, the class of the
 * pool its original node went to), the boosted bit and the running thread. Each pool
 * of class c has one thread, `thr(c)`, whose current class is `trank[thr(c)]`.
 *   the dispatcher (ChainRunner.submit): takes the class it reads (its own, or the
 *     floor if higher), marks SUBMITTED at it, reads the floor once more and, if it has
 *     risen, promotes the run itself (promoteRun) before it hands the original node to
 *     that class's pool;
 *   a promoter (promote): raises the floor (P1), then promoteRun: SUBMITTED or MOVED
 *     below it -> MOVED at its class by CAS, the first move taking a reference for the
 *     original node, and a copy task on its class's pool (P5); RUNNING below it ->
 *     under the lock, the boosted bit and the class in the word by CAS, then the
 *     running thread to its class (P6);
 *   a runner (runChain on the original node or on a copy): claims SUBMITTED or MOVED
 *     by CAS (the original node at the class it was submitted at, a copy at its own),
 *     then reads the floor and boosts itself if the floor is higher (P7); runs the
 *     body; exchanges the word to DONE and, if it finds the boosted bit, takes the lock
 *     (waiting out a promoter still in its system call) and takes its own class back.
 *     The original node releases the move's reference, won or lost.
 * The floor and the word are seq_cst on both sides, and the dispatcher's mark and its
 * second read of the floor are ordered by the asymmetric barrier (promote.c, PR4), so
 * Spin's interleaving of whole steps represents them; each mutant below stands for a
 * read that a weaker ordering would let happen early. (The code's promoter reads the
 * word once before its heavy barrier and acts on a run it finds marked, which is this
 * model's read at that moment; only a run it finds IDLE is read again after the
 * barrier, which is this model's read at the later moment.)
 *
 * What is checked:
 *   - the body runs exactly once, and only the reference the first move took is
 *     released, once (P5);
 *   - when the body runs, its thread is at the floor or above, unless a promoter is
 *     still between its raise and the end of its promoteRun, or the dispatcher before
 *     the end of its own (either will boost it);
 *   - when the last promoter and the dispatcher are done, a run that is still queued
 *     is queued at the floor's class or above: nothing waits behind lower-class work;
 *   - at the end, every thread is back at its own class.
 *
 * Mutants (scripts/model-check.sh makes sure each fails):
 *   -DMUTANT_NO_RECHECK    the dispatcher does not read the floor after its mark: a
 *                          promoter that saw IDLE and a dispatcher that read the old
 *                          floor leave the run queued at the lower class.
 *   -DMUTANT_EARLY_CLAIM_READ  the runner reads the floor before its claim.
 *   -DMUTANT_NO_MOVE       a promoter leaves a submitted run where it is.
 *   -DMUTANT_NO_RETAIN     the first move takes no reference for the original node.
 *   -DMUTANT_END_UNLOCKED  a runner that finds the boosted bit does not wait for the
 *                          lock: the promoter's system call lands after it took its
 *                          own class back, and the thread keeps the higher class.
 */
#define IDLE 0
#define SUBMITTED 1
#define MOVED 2
#define RUNNING 3
#define DONE 4
#define NONE 0

#define thr(c) (c == 1 -> 0 : (c == 4 -> 1 : 2))

byte floor = 0;       /* promotedRank */
byte st = IDLE;       /* execWord: state */
byte sub = 0;         /* execWord: the class the original node was submitted at */
byte at = 0;          /* execWord: the class it is at (moved to, or running at) */
bit boosted = 0;      /* execWord: the boosted bit */
byte tid = 0;         /* execWord: the running thread */
byte trank[3];        /* each thread's current class; their own: 1, 4, 5 */
bit lock = 0;         /* the operation's lock */
byte runs = 0;
byte noderef = 0;     /* the reference the first move took for the original node */
byte inflight = 0;    /* ghost: promoters between their raise and their promoteRun's end */
bit dispatching = 1;  /* ghost: the dispatcher has not finished its mark and re-read */
byte finished = 0;    /* ghost: promoters and dispatcher done */

inline acquire() { atomic { lock == 0 -> lock = 1 } }

inline queued_at_floor() {
    assert(inflight > 0 || dispatching || !(st == SUBMITTED || st == MOVED) || at >= floor)
}

/* P6, under the lock: the word to class r with the boosted bit, then the thread. */
inline boost_running_locked(r) {
    bt = 99;
    atomic {
        if
        :: st == RUNNING && at < r -> at = r; boosted = 1; bt = tid
        :: else -> skip
        fi
    }
    if
    :: bt != 99 -> trank[bt] = r         /* sched_setattr */
    :: else -> skip
    fi
}

proctype runner(byte t; byte copy) {
    bit won = 0, wasmoved = 0, b;
    byte bt;
    byte rank;
#ifdef MUTANT_EARLY_CLAIM_READ
    byte early = floor;                                          /* read before the claim */
#endif
    atomic {                                                     /* claimRun */
        if
        :: st == SUBMITTED || st == MOVED ->
           wasmoved = (st == MOVED);
           rank = (copy != NONE -> copy : sub);
           st = RUNNING; sub = rank; at = rank; tid = t; won = 1
        :: else -> skip
        fi
    }
    if
    :: won ->
#ifdef MUTANT_EARLY_CLAIM_READ
       if
       :: early > rank -> acquire(); boost_running_locked(early); lock = 0
       :: else -> skip
       fi;
#else
       if
       :: floor > rank -> acquire(); boost_running_locked(floor); lock = 0   /* boostSelf */
       :: else -> skip
       fi;
#endif
       atomic {                                                  /* the body */
           runs++;
           assert(runs == 1);
           assert(inflight > 0 || dispatching || trank[t] >= floor)
       }
       atomic { b = boosted; st = DONE; boosted = 0 }            /* endRun */
       if
       :: b ->
#ifndef MUTANT_END_UNLOCKED
          acquire(); lock = 0;                                   /* endBoost */
#endif
          trank[t] = (t == 0 -> 1 : (t == 1 -> 4 : 5))
       :: else -> skip
       fi;
       if
       :: copy == NONE && wasmoved -> atomic { assert(noderef > 0); noderef-- }
       :: else -> skip
       fi
    :: else ->
       if
       :: copy == NONE -> atomic { assert(noderef > 0); noderef-- }  /* lost: a copy exists */
       :: else -> skip
       fi
    fi
}

/* P5, P6: moves a submitted run, or boosts a running one, up to class r. */
inline promote_run(r) {
    byte ls, lat;
    bit first, ok;
    do
    :: atomic { ls = st; lat = at };
       if
       :: (ls == SUBMITTED || ls == MOVED) && lat < r ->
#ifdef MUTANT_NO_MOVE
          break;
#endif
          first = (ls == SUBMITTED);
#ifndef MUTANT_NO_RETAIN
          if
          :: first -> noderef++
          :: else -> skip
          fi;
#endif
          atomic {
              if
              :: st == ls && at == lat -> st = MOVED; at = r; ok = 1
              :: else -> ok = 0
              fi
          }
          if
          :: ok -> run runner(thr(r), r); break                  /* submitCopy */
          :: else ->
#ifndef MUTANT_NO_RETAIN
             if
             :: first -> noderef--
             :: else -> skip
             fi
#else
             skip
#endif
          fi
       :: ls == RUNNING && lat < r -> acquire(); boost_running_locked(r); lock = 0; break
       :: else -> break                /* IDLE: the dispatcher reads the floor; DONE */
       fi
    od
}

proctype promoter(byte r) {
    bit rose = 0;
    byte bt;
    atomic {                                                     /* raiseFloor */
        if
        :: floor < r -> floor = r; rose = 1; inflight++
        :: else -> skip
        fi
    }
    if
    :: rose ->
       promote_run(r);
       atomic { inflight--; queued_at_floor(); finished++ }
    :: else -> atomic { finished++ }
    fi
}

proctype dispatcher() {
    byte r, f, bt;
    r = (floor > 1 -> floor : 1);                               /* the class it runs at */
    atomic { st = SUBMITTED; sub = r; at = r }                   /* markSubmitted */
#ifndef MUTANT_NO_RECHECK
    f = floor;                                                   /* after the barrier */
    if
    :: f > r -> promote_run(f)
    :: else -> skip
    fi;
#endif
    atomic { dispatching = 0; queued_at_floor(); finished++ }
    run runner(thr(r), NONE)                                     /* the original node */
}

init {
    trank[0] = 1; trank[1] = 4; trank[2] = 5;
    atomic { run dispatcher(); run promoter(4); run promoter(5) }
    finished == 3;
    /* Every process has ended (only init is left). */
    _nr_pr == 1;
    assert(runs == 1);
    assert(noderef == 0);
    assert(trank[0] == 1 && trank[1] == 4 && trank[2] == 5)
}
