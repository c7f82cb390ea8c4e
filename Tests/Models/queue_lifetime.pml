/*
 * queue_lifetime.pml — a queue is never freed while a finisher still touches it, and is
 * freed once nothing refers to it (Sources/Spindle/Operations/Internals/
 * QueueMembership.swift, LT1-LT3: operationFinished, finishLocked; QueueState.swift,
 * count; QueueMembership.swift, the self-reference taken when an add counts an operation in).
 *
 * The program adds three operations and then drops its reference; each operation's
 * finisher runs as soon as it is added. The queue's references are the program's, the
 * queue's own (`selfRetained`, taken under the lock by an add that finds none, and
 * handed to the finisher that reads zero there: LT2), and one per operation that holds
 * its queue (LT3: one the program made, or any operation added outside direct mode).
 * The last reference released frees the queue.
 *   an add (under the lock): unfinished += 1; the self-reference if the queue has none;
 *   a finisher whose operation holds the queue: one RMW outside the lock; the lock only
 *     when the count reached zero, the queue is out of direct mode, or something
 *     observes the count; there, zero means drained; then its operation lets go of the
 *     queue;
 *   any other finisher (LT1): one CAS that succeeds only while another operation is
 *     unfinished, in direct mode, with no observer — after which it touches nothing —
 *     else the decrement under the lock, where zero means drained;
 *   the drainer drops the self-reference last.
 * The program may also leave direct mode (a suspension, a width) between adds: an RMW
 * on the count's scheduled bit under the lock.
 *
 * What is checked: every access of a finisher to the queue finds it alive; the count
 * never goes below zero; when every process has ended the queue is freed (no reference
 * left behind).
 *
 * Mutants (scripts/model-check.sh makes sure each fails):
 *   -DMUTANT_FREE_ON_ZERO    a lock-free decrement may reach zero, and that finisher
 *                            then drops the self-reference (the first rejected design):
 *                            an add that saw the reference still taken leaves the
 *                            queue with an unfinished operation and no reference.
 *   -DMUTANT_ZERO_NO_DRAIN   a lock-free decrement may reach zero and drops nothing:
 *                            the queue is never freed.
 *   -DMUTANT_HELD_NO_REF     an operation added outside direct mode does not hold its
 *                            queue, yet decrements outside the lock.
 */
bit lock = 0;
byte unfinished = 0;
bit scheduled = 0;      /* out of direct mode: counts' scheduledBit */
bit observed = 0;       /* hasProgress || hasCountObservers, fixed for a run */
bit selfRetained = 0;   /* the queue's reference to itself, held by the queue's state */
byte refs = 1;          /* the program's, the self-reference (wherever it is), holds */
bit freed = 0;

inline acquire() { atomic { lock == 0 -> assert(!freed); lock = 1 } }
inline unref() {
    atomic {
        assert(refs > 0 && !freed);
        refs--;
        if
        :: refs == 0 -> freed = 1
        :: else -> skip
        fi
    }
}

proctype finisher(bit held; bit owns) {
    bit drop = 0, viaLock = 0, sch;
    byte now;
    if
    :: held ->
       /* The RMW, and what it returned. */
       atomic { assert(!freed && unfinished > 0); unfinished--; now = unfinished; sch = scheduled }
       if
       :: now == 0 || sch || observed ->
          acquire();
          if
          :: unfinished == 0 -> drop = selfRetained; selfRetained = 0
          :: else -> skip
          fi;
          lock = 0
       :: else -> skip
       fi;
       if
       :: drop -> unref()
       :: else -> skip
       fi;
       if
       :: owns -> unref()                        /* its operation lets go of the queue */
       :: else -> skip
       fi
    :: else ->
       if
       :: !observed ->
          atomic {                               /* the CAS (LT1) */
              assert(!freed);
#if defined(MUTANT_FREE_ON_ZERO) || defined(MUTANT_ZERO_NO_DRAIN)
              if
              :: !scheduled && unfinished >= 1 -> unfinished--; now = unfinished
              :: else -> viaLock = 1
              fi
#else
              if
              :: !scheduled && unfinished >= 2 -> unfinished--
              :: else -> viaLock = 1
              fi
#endif
          }
#ifdef MUTANT_FREE_ON_ZERO
          if
          :: !viaLock && now == 0 ->
             atomic { drop = selfRetained; selfRetained = 0 };
             if
             :: drop -> unref()
             :: else -> skip
             fi
          :: else -> skip
          fi
#endif
       :: else -> viaLock = 1
       fi;
       if
       :: viaLock ->
          acquire();
          assert(unfinished > 0);
          unfinished--;
          if
          :: unfinished == 0 -> drop = selfRetained; selfRetained = 0
          :: else -> skip
          fi;
          lock = 0;
          if
          :: drop -> unref()
          :: else -> skip
          fi
       :: else -> skip
       fi
    fi
}

proctype program() {
    byte added = 0;
    bit made, held, owns;
    do
    :: added < 3 ->
       /* Made by the program (holds the queue), or by the block form (holds it only
        * outside direct mode: LT3). */
       if
       :: made = 1
       :: made = 0
       fi;
       acquire();                                /* count and the self-reference */
       held = made || scheduled;
#ifdef MUTANT_HELD_NO_REF
       owns = made;
#else
       owns = held;
#endif
       unfinished++;
       if
       :: !selfRetained -> selfRetained = 1; refs++
       :: else -> skip
       fi;
       if
       :: owns -> refs++
       :: else -> skip
       fi;
       lock = 0;
       run finisher(held, owns);
       added++;
       if
       :: acquire(); scheduled = 1 - scheduled; lock = 0   /* out of, or back to, direct mode */
       :: skip
       fi
    :: else -> break
    od;
    unref()                                      /* the program drops the queue */
}

init {
    if
    :: observed = 0
    :: observed = 1
    fi;
    run program();
    _nr_pr == 1;
    assert(freed)
}
