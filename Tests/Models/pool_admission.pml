/*
 * pool_admission.pml — a pool's admission line never leaves a submitter asleep while
 * the pool has room or after it has closed, admits first come first served, and never
 * holds more than its limit queued (Sources/Spindle/Pool/Admission.swift, AD1-AD4; the
 * waiting line is Runtime/WaitingLine.swift).
 *
 * The model follows the code step by step; `lock` is the admission Mutex.
 *   submitter (ThreadPool.run with a queueLimit -> Admission.take):
 *     tryTake: under the lock, not closed, nobody in line and room (queued < limit):
 *       queued += 1, admitted (AD2).
 *     else decide (waitInLine's body): under the lock, closed -> fail; cancelled ->
 *       fail; nobody in line and room -> queued += 1, admitted; otherwise join the
 *       line. Then sleep until resumed.
 *     admitted: the closure is queued; when a worker starts it, giveBack (AD1): under
 *       the lock, queued -= 1; if someone waits and there is room, the first waiter
 *       takes the place (queued += 1 again, AD2); it is resumed after the lock.
 *   canceller: submitter 1's task is cancelled: the flag, then leave (AD3).
 *   closer: shutdown's close (AD4): under the lock, closed, and every waiter taken off
 *     the line, to be resumed with shutDown after the lock.
 * Not modelled: the delay limit (AD5), which only changes what "room" means.
 *
 * What is checked, with and without a shutdown: when nothing can move, nobody sleeps
 * in the line; queued never exceeds the limit; a submitter admitted without waiting
 * found nobody in line; waiters leave the line in the order they joined; nobody is
 * handed a place once the pool has closed.
 *
 * Mutants (scripts/model-check.sh makes sure each fails):
 *   -DMUTANT_GIVEBACK_DROPS  giveBack frees the place without handing it to a waiter.
 *   -DMUTANT_CLOSE_KEEPS     close refuses newcomers but leaves the line waiting.
 * With a depth limit alone, a give-back hands its place straight to the first waiter, so
 * there is never room while anyone waits and a newcomer cannot get ahead even without
 * tryTake's look at the line; that look is for the delay limit (AD5), which this model
 * leaves out, and queue_admission.pml has the mutant that barges.
 */
#define SUBMITTERS 3
#define LIMIT 1
#define ADMITTED 1
#define REFUSED 2

byte queued = 0;
bit closed = 0;
bit lock = 0;
byte line[SUBMITTERS];
byte nline = 0;
byte outcome[SUBMITTERS]; /* how a waiter was resumed: 0 not yet, ADMITTED, REFUSED */
bit asleep[SUBMITTERS];
bit cancelled[SUBMITTERS];
byte joined = 0;
byte order[SUBMITTERS];
byte last_out = 0;

inline acquire() { atomic { lock == 0 -> lock = 1 } }
inline release() { lock = 0 }

#define ROOM (queued < LIMIT)

inline close_gap() {
    do
    :: k + 1 < nline -> line[k] = line[k + 1]; k++
    :: else -> break
    od;
    nline--
}

/* A worker starts the admitted closure: giveBack (AD1, AD2). */
proctype start_closure() {
    byte k, w;
    bit handed = 0;
    acquire();
    queued--;
#ifndef MUTANT_GIVEBACK_DROPS
    if
    :: nline > 0 && ROOM ->
       w = line[0];
       assert(!closed);              /* AD4: nobody is let in once the pool closed */
       assert(order[w] > last_out);  /* first come first served */
       last_out = order[w];
       k = 0;
       close_gap();
       queued++;
       assert(queued <= LIMIT);
       handed = 1
    :: else -> skip
    fi;
#endif
    release();
    if
    :: handed -> outcome[w] = ADMITTED
    :: else -> skip
    fi
}

proctype submitter(byte me) {
    /* tryTake */
    acquire();
    if
    :: !closed && nline == 0 && ROOM ->
       assert(nline == 0);          /* AD2: no place taken ahead of a waiter */
       queued++;
       assert(queued <= LIMIT);
       release();
       goto admitted
    :: else -> release()
    fi;
    /* decide, under the lock that the cancellation handler takes */
    acquire();
    if
    :: closed -> release(); goto end_done
    :: cancelled[me] -> release(); goto end_done
    :: nline == 0 && ROOM -> queued++; assert(queued <= LIMIT); release(); goto admitted
    :: else ->
       line[nline] = me; nline++;
       joined++; order[me] = joined;
       asleep[me] = 1;
       release()
    fi;
    outcome[me] != 0;
    asleep[me] = 0;
    if
    :: outcome[me] == REFUSED -> goto end_done
    :: else -> skip
    fi;
admitted:
    run start_closure();
end_done:
    skip
}

proctype canceller() {
    byte k;
    bit found = 0;
    cancelled[1] = 1;
    acquire();
    k = 0;
    do
    :: k < nline && line[k] == 1 -> found = 1; break
    :: k < nline && line[k] != 1 -> k++
    :: k >= nline -> break
    od;
    if
    :: found -> close_gap()
    :: else -> skip
    fi;
    release();
    if
    :: found -> outcome[1] = REFUSED
    :: else -> skip
    fi
}

proctype closer() {
    byte k, taken = 0;
    acquire();
    closed = 1;
#ifndef MUTANT_CLOSE_KEEPS
    k = 0;
    do
    :: k < nline -> taken = taken | (1 << line[k]); k++
    :: else -> break
    od;
    nline = 0;
#endif
    release();
    k = 0;
    do
    :: k < SUBMITTERS ->
       if
       :: taken & (1 << k) -> outcome[k] = REFUSED
       :: else -> skip
       fi;
       k++
    :: else -> break
    od
}

init {
    atomic {
        run submitter(0);
        run submitter(1);
        run submitter(2);
        run canceller();
        /* With and without a shutdown: a close must not hide a lost wake-up. */
        if
        :: run closer()
        :: skip
        fi
    }
}

active proctype watchdog() {
    timeout -> assert(!asleep[0] && !asleep[1] && !asleep[2])
}
