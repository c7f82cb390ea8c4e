/*
 * submit_wakeup.pml — no lost wake-up for submissions from outside the pool (park.c,
 * "No lost wake-up"; S1, S2, S3; pool.c's submit; worker.c's found_work; spare.c's
 * count_out).
 *
 * What is checked: whenever every thread of the model is blocked — the submitters done,
 * every worker asleep or blocked in a task — nothing is queued. A wake-up lost between
 * a submitter that saw a searcher (so woke nobody) and that searcher going to sleep
 * would leave a task queued with every worker asleep: Spin's `timeout` is exactly
 * "nothing can move". The first task a worker takes blocks until every other task has
 * run, as a task waiting on a semaphore that a later task signals does, and its worker
 * counts itself out for the wait (spare.c) in a pool without spares: the work queued
 * behind it must reach the other worker.
 *
 * The model follows the engine's steps, each a seq_cst operation or under the idle
 * lock, which Spin's interleavings represent:
 *   submitter: reserve (`pending`, the injector's `len`, += 1: the publishing RMW a),
 *     link (`queued`), then load the state (c) and wake a sleeper if nobody searches
 *     and somebody sleeps;
 *   worker: look at the injector; with nothing there, become a searcher if fewer than
 *     half the workers search (S1), look once more, then park: under the lock, leave
 *     the counts (x), and if it leaves no searcher behind — it was the last one, or it
 *     did not search because another did, which has stopped since — look at the queue
 *     once more (y, z: `len` > 0, as spindle_pool_has_pending_work reads it) and wake a
 *     sleeper if there is work; a worker that finds work while
 *     searching stops searching, and if it was the last searcher and more is queued,
 *     wakes the next (S2); the blocking task's worker leaves the unparked count, looks
 *     at the queue once more and wakes a sleeper if there is work (count_out), and
 *     counts itself in when the task returns;
 *   wake_one: under the lock, if the counts still say so, take a sleeper off the
 *     list and count it unparked and searching; after the lock, leave it a token (the
 *     parker's NOTIFIED: a wake that comes before the sleep is not lost, K1). With
 *     nobody on the list (a worker counted out, the other not parked yet) it wakes
 *     nobody: the pool has no spare to start.
 * The backlog wake-up (B1) only adds wake-ups and is left out.
 *
 * Three mutants must each make the model find a lost wake-up (scripts/model-check.sh
 * checks that they do): `-DMUTANT` leaves out the last searcher's second look (step
 * z); `-DMUTANT_NOTIFY_FIRST` has the submitter look at the counts before it
 * publishes its task; `-DMUTANT_ONLY_SEARCHERS_LOOK` gives the second look only to
 * the last searcher, not to a worker that parks without searching and leaves nobody
 * searching. (count_out's own look matters where a spare can be started, which this
 * model, like the pool it follows, has none of.)
 */
#define SUBMITTERS 2
#define WORKERS 2   /* wake-ups below pick among two sleepers */

byte pending = 0;     /* the injector's `len`: reserved minus popped */
byte queued = 0;      /* linked, not yet popped */
byte ran = 0;         /* tasks run to their end, the blocking one aside */
bit blocker = 0;      /* the blocking task has been taken */
byte searching = 0;   /* idle state: searching count */
byte unparked = WORKERS; /* idle state: unparked count */
bit lock = 0;
bit asleep[WORKERS];  /* on the sleepers list */
bit token[WORKERS];   /* the parker's NOTIFIED */

inline acquire() { atomic { lock == 0 -> lock = 1 } }
inline release() { lock = 0 }

#define NOBODY 255

/* notify_one: if nobody searches and somebody sleeps, re-check under the lock, take a
 * sleeper off the list and count it unparked and searching; unpark it (its token)
 * after the lock, as spindle_wake_one does. `wakee` is the caller's local. */
inline notify_one() {
    if
    :: searching == 0 && unparked < WORKERS ->
       acquire();
       wakee = NOBODY;
       if
       :: searching == 0 && unparked < WORKERS ->
          if
          :: asleep[0] -> asleep[0] = 0; wakee = 0
          :: asleep[1] -> asleep[1] = 0; wakee = 1
          :: else -> skip                     /* nobody listed, and no spare */
          fi;
          if
          :: wakee != NOBODY -> atomic { unparked++; searching++ }
          :: else -> skip
          fi
       :: else -> skip
       fi;
       release();
       if
       :: wakee != NOBODY -> token[wakee] = 1
       :: else -> skip
       fi
    :: else -> skip
    fi
}

active [SUBMITTERS] proctype Submitter() {
    byte wakee;
#ifdef MUTANT_NOTIFY_FIRST
    notify_one();
#endif
    pending++;                          /* a: reserve */
    queued++;                           /* link */
#ifndef MUTANT_NOTIFY_FIRST
    notify_one()                        /* c: load the state; wake if nobody searches */
#endif
}

active [WORKERS] proctype Worker() {
    bit me_searching = 0;
    bit last = 0;
    byte wakee;
    byte looks;
    byte id = _pid - SUBMITTERS;
    do
    :: atomic { queued > 0 -> queued-- };   /* found work */
       pending--;
       if
       :: me_searching ->
          me_searching = 0;
          atomic { last = (searching == 1); searching-- };   /* stop searching (RMW) */
          if
          :: last && pending > 0 -> notify_one()                  /* S2 */
          :: else -> skip
          fi
       :: else -> skip
       fi;
       if
       :: !blocker ->
          /* The blocking task: count out, look once more, wait for the others. */
          blocker = 1;
          acquire(); unparked--; release();
          if
          :: pending > 0 -> notify_one()
          :: else -> skip
          fi;
          ran == SUBMITTERS - 1;
          acquire(); unparked++; release()
       :: else -> ran++
       fi
    :: queued == 0 ->                       /* nothing found */
       /* S1: search if fewer than half the workers search. */
       if
       :: !me_searching && 2 * searching < WORKERS -> searching++; me_searching = 1
       :: else -> skip
       fi;
       looks = 0;
       do
       :: looks < 1 && queued == 0 -> looks++  /* a look that finds nothing */
       :: else -> break
       od;
       if
       :: queued > 0 -> skip                 /* found something: back to the top */
       :: else ->
          /* Park: x under the lock. */
          acquire();
          atomic {
#ifdef MUTANT_ONLY_SEARCHERS_LOOK
             last = me_searching && searching == 1;
#else
             /* Nobody searching once we have left the counts. */
             last = (searching - me_searching == 0);
#endif
             if :: me_searching -> searching-- :: else -> skip fi;
             unparked--
          };
          me_searching = 0;
          asleep[id] = 1;
          release();
#ifndef MUTANT
          /* y, z: a worker that leaves nobody searching looks once more. */
          if
          :: last && pending > 0 -> notify_one()
          :: else -> skip
          fi;
#endif
          /* Sleep until a token (K1). The waker counted us unparked and searching. */
end_asleep:
          atomic { token[id] == 1 -> token[id] = 0 };
          me_searching = 1
       fi
    od
}

/* When nothing can move, nothing may be queued. */
active proctype Final() {
    timeout -> assert(queued == 0)
}
