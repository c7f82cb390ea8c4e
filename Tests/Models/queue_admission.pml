/*
 * queue_admission.pml — an OperationQueue's admission waiting line never leaves a waiter
 * asleep while the queue has room, and admits first come first served
 * (Sources/Spindle/Operations/Internals/QueueAdmission.swift, QA1-QA4; the waiting line
 * is Runtime/WaitingLine.swift).
 *
 * The model follows the code step by step. `lock` is the admission Mutex; `count` is
 * the queue's operationCount, which changes outside that lock.
 *   submitter (OperationQueue.run(ifFull: .wait) -> QueueAdmission.reserve):
 *     tryReserve: under the lock, room (count + reserved < limit) and nobody in line:
 *       reserved += 1, admitted (QA1, QA3).
 *     else decide (waitInLine's body): under the lock, cancelled -> fail; room and
 *       nobody in line -> reserved += 1, admitted; otherwise join the line. Then sleep
 *       until resumed (the continuation).
 *     admitted: addOperation (count += 1, outside the lock), then `added`: under the
 *       lock, reserved -= 1 and admitWaiters; resume them after the lock (QA1).
 *     its operation finishes: count -= 1, then the count observer, countChanged: under
 *       the lock, admitWaiters; resume after the lock (QA2).
 *   admitWaiters: while someone waits and there is room, take the first off the line
 *     and reserve for it (QA3).
 *   foreign: Foundation's addOperation, never refused: count += 1, later its finish as
 *     above.
 *   canceller: the task of submitter 1 is cancelled: the flag, then the cancellation
 *     handler's leave: under the lock, the waiter is taken off the line if it is still
 *     there, and resumed with CancellationError (QA3).
 * Not modelled: a finish that skips the observer (QueueLifetime's lock-free way, taken
 * only while other operations remain, QA2), and raising the limit (QA4).
 *
 * What is checked:
 *   - when nothing can move, no submitter is asleep in the line (a lost wake-up leaves
 *     one there: Spin's `timeout`);
 *   - a submitter admitted without waiting found nobody in line, and waiters leave the
 *     line in the order they joined (QA3: no barging).
 *
 * Mutants (scripts/model-check.sh makes sure each fails):
 *   -DMUTANT_ADDED_NO_ADMIT  `added` drops the reservation without admitting waiters:
 *                            an operation that finished while its place was still
 *                            reserved freed room nobody looks at.
 *   -DMUTANT_ROOM_OUTSIDE    decide reads the room before it takes the lock to join.
 *   -DMUTANT_BARGE           tryReserve does not look at the line.
 */
#define SUBMITTERS 3
#define LIMIT 1
#define ADMITTED 1
#define CANCELLED 2

byte count = 0;         /* operationCount */
byte reserved = 0;
bit lock = 0;
byte line[SUBMITTERS];  /* the waiting line: submitter ids, first at line[0] */
byte nline = 0;
byte outcome[SUBMITTERS]; /* how a waiter was resumed: 0 not yet, ADMITTED, CANCELLED */
bit asleep[SUBMITTERS];
bit cancelled[SUBMITTERS];
byte joined = 0;        /* join numbers handed out so far */
byte order[SUBMITTERS]; /* each waiter's join number, from 1 */
byte last_out = 0;          /* the join number of the last_out waiter admitted off the line */

inline acquire() { atomic { lock == 0 -> lock = 1 } }
inline release() { lock = 0 }

#define ROOM (count + reserved < LIMIT)

/* Shifts the line left over position k (WaitingLine's FIFO removal). */
inline close_gap() {
    do
    :: k + 1 < nline -> line[k] = line[k + 1]; k++
    :: else -> break
    od;
    nline--
}

/* Under the lock: admitWaiters. While someone waits and there is room, the first
 * waiter is taken off the line with a place reserved for it; the caller resumes the
 * waiters in `admitted` (a bit each) after the lock. */
inline admit_waiters() {
    admitted = 0;
    do
    :: nline > 0 && ROOM ->
       w = line[0];
       assert(order[w] > last_out);   /* QA3: off the line in the order they joined */
       last_out = order[w];
       k = 0;
       close_gap();
       reserved++;
       admitted = admitted | (1 << w)
    :: else -> break
    od
}

/* After the lock: resume them (the continuations). */
inline resume_admitted() {
    k = 0;
    do
    :: k < SUBMITTERS ->
       if
       :: admitted & (1 << k) -> outcome[k] = ADMITTED
       :: else -> skip
       fi;
       k++
    :: else -> break
    od
}

/* An operation of the queue runs and finishes: the count drops, then the count
 * observer (countChanged) admits whom the room lets in. */
proctype operation() {
    byte k, w, admitted;
    count--;
    acquire();
    admit_waiters();
    release();
    resume_admitted()
}

proctype submitter(byte me) {
    byte k, w, admitted;
    bit got_room;
    /* tryReserve */
    acquire();
    if
#ifdef MUTANT_BARGE
    :: ROOM ->
#else
    :: nline == 0 && ROOM ->
#endif
       assert(nline == 0);          /* QA3: no place taken ahead of a waiter */
       reserved++;
       release();
       goto run_it
    :: else -> release()
    fi;
    /* decide, under the lock that the cancellation handler takes */
#ifdef MUTANT_ROOM_OUTSIDE
    got_room = ROOM;
    acquire();
#else
    acquire();
    got_room = ROOM;
#endif
    if
    :: cancelled[me] -> release(); goto end_done
    :: nline == 0 && got_room -> reserved++; release(); goto run_it
    :: else ->
       line[nline] = me; nline++;
       joined++; order[me] = joined;
       asleep[me] = 1;
       release()
    fi;
    /* asleep until resumed: admitted off the line, or cancelled */
    outcome[me] != 0;
    asleep[me] = 0;
    if
    :: outcome[me] == CANCELLED -> goto end_done
    :: else -> skip
    fi;
run_it:
    /* addOperation: the operation is in the count, and may run and finish at once */
    count++;
    run operation();
    /* added: the reservation goes, and the room it leaves is looked for (QA1) */
    acquire();
    reserved--;
#ifdef MUTANT_ADDED_NO_ADMIT
    admitted = 0;
#else
    admit_waiters();
#endif
    release();
    resume_admitted();
end_done:
    skip
}

/* Foundation's addOperation, never refused: counts toward the limit all the same. */
proctype foreign() {
    count++;
    run operation()
}

/* Submitter 1's task is cancelled: the flag, then the handler's leave. */
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
    :: found -> outcome[1] = CANCELLED
    :: else -> skip
    fi
}

init {
    atomic {
        run foreign();
        run submitter(0);
        run submitter(1);
        run submitter(2);
        run canceller()
    }
}

/* When nothing can move, nobody sleeps in the line: a lost wake-up leaves one there. */
active proctype watchdog() {
    timeout -> assert(!asleep[0] && !asleep[1] && !asleep[2])
}
