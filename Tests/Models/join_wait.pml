/*
 * join_wait.pml — a worker waiting in a join for a stolen half (join.c, L1 and L2;
 * worker.c, spindle_worker_wait_latch; park.c, spindle_idle_sleep and
 * spindle_idle_wake_latch_waiter), against the thief that sets the latch and a
 * submission elsewhere that wakes a sleeper.
 *
 * What is checked, for every interleaving of the waiter, the setter and two wakes from
 * elsewhere:
 *   - no lost wake-up (L1): once the latch is set and everything has stopped, the
 *     waiter has left its wait;
 *   - the idle accounting stays true: the waiter leaves its wait neither listed as a
 *     sleeper nor counted as a task sleeper, and at the end the counts agree with
 *     where it is (`unparked` is 0 exactly while it is listed, `task_sleepers` never
 *     goes below 0, `searching` is 1 exactly while it searches);
 *   - a setter that comes late (L2) finds the waiter parked in its main loop, not in
 *     the wait, and leaves it listed: that sleeper is not a task sleeper.
 *
 * Abstractions:
 *   - The parker is a token: `unpark` leaves it, `park` blocks until there is one and
 *     takes it (park.c, K1; the futex's spurious returns loop inside `park`).
 *   - The waiter finds no other work while it waits; the thief's half is done when the
 *     setter starts. After the wait it goes back to its task and, its task done, parks
 *     in its main loop once.
 *   - The idle lock is `lock`. Counts are of this worker only.
 *
 * Four mutants must each make the model find a failure (scripts/model-check.sh checks
 * that they do):
 *   -DMUTANT_STORE_SLEEPING     the waiter announces its sleep with a plain store, not a
 *                               CAS that fails on SET;
 *   -DMUTANT_SETTER_LOAD_STORE  the setter reads the latch, then stores SET, instead of
 *                               one exchange;
 *   -DMUTANT_UNLIST_ANY         the setter takes any listed waiter off the list, not
 *                               only one parked in a join wait;
 *   -DMUTANT_NO_UNLIST          a waiter that finds its latch set leaves the wait still
 *                               listed.
 */
#define UNSET 0
#define SLEEPING 1
#define SET 2
#define WAKES 2

byte latch = UNSET;
bit token = 0;             /* the waiter's parker */
bit lock = 0;
bit in_sleepers = 0;       /* under lock */
bit waiting_in_task = 0;   /* under lock */
bit woken_searching = 0;   /* under lock */
short task_sleepers = 0;   /* under lock */
byte unparked = 1;         /* the waiter counts as unparked */
byte searching = 0;
bit w_searching = 0;       /* the waiter's own flag */
bit wait_done = 0;
bit setter_done = 0;
bit main_parked = 0;       /* the waiter is in its main loop's sleep */

inline acquire() { atomic { lock == 0 -> lock = 1 } }
inline release() { lock = 0 }
inline park() { atomic { token == 1 -> token = 0 } }
inline unpark() { token = 1 }

/* unlist_task_sleeper_locked. */
inline unlist_task() {
    in_sleepers = 0;
    task_sleepers--;
    assert(task_sleepers >= 0);
    unparked++
}

/* list_sleeper_locked: leaves the counts (and `searching`, if it searched) and lists
 * itself; a task sleeper when it waits on a latch. */
inline list_self(in_task) {
    acquire();
    unparked--;
    if
    :: w_searching -> searching--; w_searching = 0
    :: else -> skip
    fi;
    in_sleepers = 1;
    waiting_in_task = in_task;
    if
    :: in_task -> task_sleepers++
    :: else -> skip
    fi;
    release()
}

/* spindle_idle_sleep's loop, once: park, then see under the lock whether a waker took
 * the waiter off the list (and if so, take up what the wake said: take_wake). */
inline park_and_look() {
    park();
    acquire();
    still = in_sleepers;
    if
    :: !still -> w_searching = woken_searching
    :: else -> skip
    fi;
    release()
}

active proctype Waiter() {
    bit still, failed;
    /* spindle_worker_wait_latch */
    do
    :: latch == SET -> break
    :: else ->
       /* (find_task found nothing) The announcement: UNSET -> SLEEPING, failing on SET. */
#ifdef MUTANT_STORE_SLEEPING
       failed = 0;
       latch = SLEEPING;
#else
       atomic {
           if
           :: latch == UNSET -> latch = SLEEPING; failed = 0
           :: latch == SLEEPING -> failed = 0    /* announced before a wake from elsewhere */
           :: latch == SET -> failed = 1
           fi
       };
#endif
       if
       :: failed -> break
       :: else -> skip
       fi;
       /* spindle_idle_sleep(w, latch) */
       list_self(1);
       do
       :: latch == SET -> goto unlist
       :: else ->
          park_and_look();
          if
          :: !still -> goto woken
          :: else -> skip    /* a stale token: sleep again, unless the latch is set */
          fi
       od;
unlist:
       acquire();
#ifdef MUTANT_NO_UNLIST
       skip;
#else
       if
       :: in_sleepers -> unlist_task(); w_searching = 0
       :: else -> w_searching = woken_searching
       fi;
#endif
       release();
woken:
       still = 0
    od;
    /* Back to its task: a searcher stops searching (found_work). */
    atomic {
        if
        :: w_searching -> searching--; w_searching = 0
        :: else -> skip
        fi
    };
    acquire();
    assert(!in_sleepers && task_sleepers == 0);
    release();
    wait_done = 1;
    /* Its task done, it parks in its main loop; a wake from elsewhere may take it off
     * the list, and a stale token only makes it look again. */
    list_self(0);
    main_parked = 1;
    /* Parked for good here is a valid end: an idle worker. */
end_idle:
    do
    :: park_and_look();
       if
       :: !still -> break
       :: else -> skip
       fi
    od;
    main_parked = 0
}

/* The thief, its half done: latch_set, then spindle_idle_wake_latch_waiter. */
active proctype Setter() {
    byte prev;
#ifdef MUTANT_SETTER_LOAD_STORE
    prev = latch;
    latch = SET;
#else
    atomic { prev = latch; latch = SET };
#endif
    if
    :: prev == SLEEPING ->
       acquire();
#ifdef MUTANT_UNLIST_ANY
       if
       :: in_sleepers -> unlist_task(); woken_searching = 0
       :: else -> skip
       fi;
#else
       if
       :: in_sleepers && waiting_in_task -> unlist_task(); woken_searching = 0
       :: else -> skip
       fi;
#endif
       release();
       unpark()
    :: else -> skip
    fi;
    setter_done = 1
}

/* Submissions elsewhere: wake_one takes a listed sleeper, whichever kind, as a searcher. */
active proctype Waker() {
    byte k = WAKES;
    do
    :: k > 0 ->
       k--;
       acquire();
       if
       :: in_sleepers ->
          in_sleepers = 0;
          woken_searching = 1;
          if
          :: waiting_in_task -> task_sleepers--; assert(task_sleepers >= 0)
          :: else -> skip
          fi;
          unparked++;
          searching++;
          release();
          unpark()
       :: else -> release()
       fi
    :: break
    od
}

/* Once nothing can move: the latch set means the waiter has left its wait, and the
 * counts agree with where it is. */
active proctype Final() {
    timeout ->
    assert(!setter_done || wait_done);
    assert(task_sleepers == 0 || (in_sleepers && waiting_in_task && task_sleepers == 1));
    assert((unparked == 0) == in_sleepers);
    assert(searching == w_searching)
}
