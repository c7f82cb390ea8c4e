/*
 * barrier_add.pml — a barrier against the other adds to its queue, the queue draining
 * and its cancellation: what was added after a barrier never runs beside what was added
 * before it, and a barrier that runs its block runs alone
 * (Sources/Spindle/Operations/Internals/Readiness.swift, R9-R11: countEdges,
 * completeEdges, countBarrierEdge, completeBarrierEdge, registerEdge;
 * BarrierOperation.swift, its `isReady`; QueueMembership.swift, A3: registerLocked;
 * operationFinished and the drain, LT2; OperationQueue.swift, cancelAllOperations).
 *
 * A queue of the default width holds A, unfinished, and nothing else. Two threads each
 * add a barrier (P, Q) and a third adds a plain operation X, while A runs and finishes
 * at any moment; as a variant (-DVARIANT_CANCEL, which must pass too), one thread adds
 * P, another X, and a third cancels all the queue's operations:
 *   a barrier's add: under the queue's lock, one section (R10): an edge counted to every
 *     operation the list holds that is not done, the barrier made the queue's last
 *     barrier, linked and counted in; after the lock, each edge registered with its
 *     operation under that operation's lock, or counted down at once if that one's
 *     finish has begun;
 *   X's add: under the queue's lock, linked and counted in; if the last barrier's finish
 *     has not begun, an edge to it counted (R9), else the last barrier forgotten; after
 *     the lock, that edge registered, or counted down;
 *   the cancellation: under the queue's lock, what the list holds that is not done;
 *     after it, each of those cancelled, one at a time;
 *   an operation starts once it is linked and ready: its count is zero, or, unless it
 *     is a barrier, it is cancelled (R6, R11); it runs its block unless it was cancelled
 *     when it started; then it finishes: under its own lock its finish begins and counts
 *     down every registered dependent (F2); it is marked done; under the queue's lock it
 *     is counted out, and the queue that has none left drains and forgets its last
 *     barrier (LT2).
 * The queue's lock and each operation's lock are atomic steps here: nothing inside them
 * waits. Each add takes its place in the queue's order (`seq`) in its locked section.
 *
 * What is checked: no two blocks run at once, one added before a barrier and one after
 * it, whether that barrier was cancelled or not; a barrier's block runs alone (Foundation's
 * "the barrier block executes by itself"); and when nothing can move, every operation
 * has finished.
 *
 * Mutants (scripts/model-check.sh makes sure each fails):
 *   -DMUTANT_BARRIER_TWO_SECTIONS  a barrier becomes the last barrier and reads what is
 *                                  ahead of it in one locked section, counts and
 *                                  registers its edges after it, and is linked, counted
 *                                  in and given its place in a second locked section.
 *   -DMUTANT_CANCELLED_BARRIER_READY  a cancelled barrier is ready whatever its count, as
 *                                  any other cancelled operation is.
 */
#define A 0
#define P 1
#define Q 2
#define X 3
#define N 4
#define NONE 255

byte count = 1;          /* the queue's unfinished operations: A */
byte lastBarrier = NONE; /* State.lastBarrier */
byte nextSeq = 1;        /* the last place given in the queue's order: A's */
byte seq[N];             /* each one's place in the order its adds took; 0: not added */
bit linked[N];           /* in the queue's list, counted in */
bit done[N];             /* queueSync.done: marked as it is counted out */
bit handled[N];          /* finishHandled: its finish has begun (F1) */
bit cancelled[N];
bit running[N];          /* running its block */
bit finished[N];
byte cnt[N];             /* Guarded.unfinished */
bit edge[N * N];         /* edge[i * N + j]: i waits for j, counted */
bit registered[N * N];   /* j's dependents list i */

#ifdef MUTANT_CANCELLED_BARRIER_READY
#define VARIANT_CANCEL
#endif

#define isBarrier(i) ((i) == P || (i) == Q)
#ifdef MUTANT_CANCELLED_BARRIER_READY
#define ready(i) (cnt[i] == 0 || cancelled[i])
#else
#define ready(i) (cnt[i] == 0 || (cancelled[i] && !isBarrier(i)))
#endif
/* Blocks i and j, with barrier b between them in the queue's order. */
#define across(i, j, b) (seq[b] != 0 && ((seq[i] < seq[b] && seq[b] < seq[j]) || (seq[j] < seq[b] && seq[b] < seq[i])))

/* `registerEdge`: under j's lock, listed with j unless j's finish has begun. */
inline register(i, j) {
    atomic {
        if
        :: handled[j] -> cnt[i]--
        :: else -> registered[i * N + j] = 1
        fi
    }
}

inline countEdge(i, j) {
    edge[i * N + j] = 1;
    cnt[i]++
}

inline place(i) {
    nextSeq++;
    seq[i] = nextSeq
}

proctype Run(byte i) {
    byte k;
    atomic {
        linked[i] && ready(i) ->
        if
        :: !cancelled[i] ->
            running[i] = 1;
            k = 0;
            do
            :: k < N ->
                if
                :: k != i && running[k] ->
                    assert(!isBarrier(i) && !isBarrier(k));
                    assert(!across(i, k, P) && !across(i, k, Q))
                :: else -> skip
                fi;
                k++
            :: else -> k = 0; break
            od
        :: else -> skip /* start() returns without running the block */
        fi
    }
    running[i] = 0;
    /* F2, under its own lock */
    atomic {
        handled[i] = 1;
        k = 0;
        do
        :: k < N -> if :: registered[k * N + i] -> cnt[k]-- :: else -> skip fi; k++
        :: else -> k = 0; break
        od
    }
    done[i] = 1;
    /* counted out under the queue's lock; the last one drains it (LT2) */
    atomic {
        count--;
        if :: count == 0 -> lastBarrier = NONE :: else -> skip fi;
        finished[i] = 1
    }
}

proctype AddBarrier(byte b) {
    byte j;
#ifndef MUTANT_BARRIER_TWO_SECTIONS
    /* R10: one section of the queue's lock */
    atomic {
        j = 0;
        do
        :: j < N -> if :: j != b && linked[j] && !done[j] -> countEdge(b, j) :: else -> skip fi; j++
        :: else -> j = 0; break
        od;
        lastBarrier = b;
        linked[b] = 1;
        place(b);
        count++
    }
    j = 0;
    do
    :: j < N -> if :: edge[b * N + j] -> register(b, j) :: else -> skip fi; j++
    :: else -> j = 0; break
    od
#else
    bit ahead[N];
    atomic {
        lastBarrier = b;
        j = 0;
        do
        :: j < N -> ahead[j] = (j != b && linked[j] && !done[j]); j++
        :: else -> break
        od
    }
    j = 0;
    do
    :: j < N -> if :: ahead[j] -> atomic { countEdge(b, j) }; register(b, j) :: else -> skip fi; j++
    :: else -> break
    od;
    atomic {
        linked[b] = 1;
        place(b);
        count++
    }
#endif
}

proctype AddX() {
    byte behind = NONE;
    /* A3: the queue's lock; the edge to a pending barrier counted there (R9) */
    atomic {
        linked[X] = 1;
        place(X);
        count++;
        if
        :: lastBarrier != NONE && !handled[lastBarrier] -> behind = lastBarrier; countEdge(X, behind)
        :: lastBarrier != NONE && handled[lastBarrier] -> lastBarrier = NONE
        :: else -> skip
        fi
    }
    if
    :: behind != NONE -> register(X, behind)
    :: else -> skip
    fi
}

/* `cancelAllOperations()`: the list under the queue's lock, then each one's `cancel()`. */
proctype CancelAll() {
    bit listed[N];
    byte j;
    atomic {
        j = 0;
        do
        :: j < N -> listed[j] = (linked[j] && !done[j]); j++
        :: else -> break
        od
    }
    j = 0;
    do
    :: j < N -> if :: listed[j] && !handled[j] -> cancelled[j] = 1 :: else -> skip fi; listed[j] = 0; j++
    :: else -> j = 0; break
    od
}

init {
    linked[A] = 1;
    seq[A] = 1;
    atomic {
        run Run(A); run Run(P); run Run(Q); run Run(X);
        run AddBarrier(P); run AddX();
#ifdef VARIANT_CANCEL
        run CancelAll()
#else
        run AddBarrier(Q)
#endif
    }
#ifdef VARIANT_CANCEL
    timeout -> assert(finished[A] && finished[P] && finished[X])
#else
    timeout -> assert(finished[A] && finished[P] && finished[Q] && finished[X])
#endif
}
