/*
 * mutex.pml — the queues' lock (mutex.c): a three-state futex mutex, 0 unlocked, 1
 * locked, 2 locked and possibly contended, with a bounded spin before sleeping.
 *
 * What is checked, for every interleaving of three threads that each take the lock
 * twice: mutual exclusion (M1), and no lost wake-up (M2): once nothing can move, every
 * thread has finished, none asleep on the word.
 *
 * Abstractions:
 *   - The futex: `futex_wait(2)` puts the caller to sleep only if the word is still 2,
 *     in one step, as the kernel checks it under its own lock; `futex_wake` wakes one
 *     sleeper, any of them, if there is one. A spurious return would only make the
 *     caller loop (mutex.c's lock loop re-checks), so it is not modelled.
 *   - The spin is two rounds instead of MUTEX_SPINS: it only decides how soon a thread
 *     falls through to the exchange, which is checked from any point.
 *
 * Four mutants must each make the model find a failure (scripts/model-check.sh checks
 * that they do):
 *   -DMUTANT_SPIN_PLAIN_STORE   the spin takes a lock it saw free with a plain store,
 *                               not a CAS: two threads inside;
 *   -DMUTANT_RELOCK_ONE         a woken thread takes the lock as 1, not 2, so the
 *                               unlock after it wakes nobody else;
 *   -DMUTANT_SLEEP_ON_ONE       a contender marks the word 1, not 2, before sleeping;
 *   -DMUTANT_UNLOCK_LOAD_STORE  the unlock reads the word, then stores 0, instead of
 *                               one exchange.
 */
#define THREADS 3
#define ROUNDS 2
#define SPINS 2

byte word = 0;
byte inside = 0;          /* threads in the critical section */
bit asleep[THREADS];      /* asleep in futex_wait on the word */
byte done = 0;

/* spindle_futex_wait(word, 2) */
inline futex_wait(me) {
    atomic {
        if
        :: word == 2 -> asleep[me] = 1
        :: else -> skip
        fi
    };
    asleep[me] == 0
}

/* spindle_futex_wake(word, 1). It names each thread's flag, so it is written for three. */
#if THREADS != 3
#error "futex_wake wakes one of three threads"
#endif
inline futex_wake() {
    atomic {
        if
        :: asleep[0] -> asleep[0] = 0
        :: asleep[1] -> asleep[1] = 0
        :: asleep[2] -> asleep[2] = 0
        :: else -> skip
        fi
    }
}

active [THREADS] proctype Thread() {
    byte r = 0, i, s, prev;
    bit got, woke;
    do
    :: r < ROUNDS ->
       /* spindle_mutex_lock */
       atomic { if :: word == 0 -> word = 1; got = 1 :: else -> got = 0 fi };
       i = 0;
       do
       :: got || i == SPINS -> break
       :: !got && i < SPINS ->
          i++;
          s = word;
          if
#ifdef MUTANT_SPIN_PLAIN_STORE
          :: s == 0 -> word = 1; got = 1
#else
          :: s == 0 -> atomic { if :: word == 0 -> word = 1; got = 1 :: else -> skip fi }
#endif
          :: s == 2 -> break    /* others sleep: queue up behind them */
          :: else -> skip
          fi
       od;
       do
       :: got -> break
       :: else ->
#ifdef MUTANT_RELOCK_ONE
          if
          :: woke -> atomic { prev = word; if :: word == 0 -> word = 1 :: else -> word = 2 fi }
          :: else -> atomic { prev = word; word = 2 }
          fi;
#elif defined(MUTANT_SLEEP_ON_ONE)
          atomic { prev = word; word = 1 };
#else
          atomic { prev = word; word = 2 };
#endif
          if
          :: prev == 0 -> got = 1
          :: else ->
#ifdef MUTANT_SLEEP_ON_ONE
             atomic { if :: word == 1 -> asleep[_pid] = 1 :: else -> skip fi };
             asleep[_pid] == 0
#else
             futex_wait(_pid)
#endif
             ;
             woke = 1
          fi
       od;
       /* The critical section (M1). */
       inside++;
       assert(inside == 1);
       inside--;
       /* spindle_mutex_unlock */
#ifdef MUTANT_UNLOCK_LOAD_STORE
       prev = word;
       word = 0;
#else
       atomic { prev = word; word = 0 };
#endif
       if
       :: prev == 2 -> futex_wake()
       :: else -> skip
       fi;
       got = 0; woke = 0; s = 0; prev = 0;
       r++
    :: r == ROUNDS -> break
    od;
    done++
}

/* Once nothing can move: everyone has finished; nobody sleeps on a lock that is free. */
active proctype Final() {
    timeout -> assert(done == THREADS)
}
