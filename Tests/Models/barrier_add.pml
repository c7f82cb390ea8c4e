/*
 * barrier_add.pml — a barrier's add against other adds to its queue and against the
 * queue draining: a barrier never runs beside another operation of its queue
 * (Sources/Spindle/Operations/Internals/Readiness.swift, R9 and R10: countEdges,
 * completeEdges, countBarrierEdge, completeBarrierEdge, registerEdge;
 * QueueMembership.swift, A3: registerLocked; operationFinished and the drain, LT2).
 *
 * A queue of the default width holds A, unfinished, and nothing else. Two threads each
 * add a barrier (P, Q) and a third adds a plain operation X, while A runs and finishes
 * at any moment:
 *   a barrier's add: under the queue's lock, one section (R10): an edge counted to every
 *     operation the list holds that is not done, the barrier made the queue's last
 *     barrier, linked and counted in; after the lock, each edge registered with its
 *     operation under that operation's lock, or counted down at once if that one's
 *     finish has begun;
 *   X's add: under the queue's lock, linked and counted in; if the last barrier's finish
 *     has not begun, an edge to it counted (R9), else the last barrier forgotten; after
 *     the lock, that edge registered, or counted down;
 *   an operation runs once it is linked and its count is zero (the queue's readiness,
 *     which readiness.pml checks in detail), then finishes: under its own lock its
 *     finish begins and counts down every registered dependent (F2); it is marked done;
 *     under the queue's lock it is counted out, and the queue that has none left drains
 *     and forgets its last barrier (LT2).
 * The queue's lock and each operation's lock are atomic steps here: nothing inside them
 * waits.
 *
 * What is checked: a barrier runs alone — nothing else of its queue runs while it does
 * (Foundation's "the barrier block executes by itself"); and when nothing can move,
 * every operation has finished.
 *
 * Mutants (scripts/model-check.sh makes sure each fails):
 *   -DMUTANT_BARRIER_TWO_SECTIONS  a barrier becomes the last barrier and reads what is
 *                                  ahead of it in one locked section, counts and
 *                                  registers its edges after it, and is linked and
 *                                  counted in, in a second locked section.
 */
#define A 0
#define P 1
#define Q 2
#define X 3
#define N 4
#define NONE 255

byte count = 1;          /* the queue's unfinished operations: A */
byte lastBarrier = NONE; /* State.lastBarrier */
bit linked[N];           /* in the queue's list, counted in */
bit done[N];             /* queueSync.done: marked as it is counted out */
bit handled[N];          /* finishHandled: its finish has begun (F1) */
bit running[N];
bit finished[N];
byte cnt[N];             /* Guarded.unfinished */
bit edge[N * N];         /* edge[i * N + j]: i waits for j, counted */
bit registered[N * N];   /* j's dependents list i */

#define isBarrier(i) ((i) == P || (i) == Q)

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

proctype Run(byte i) {
    byte k;
    atomic {
        linked[i] && cnt[i] == 0 ->
        running[i] = 1;
        if
        :: isBarrier(i) -> assert(!running[A] && !running[X] && !running[P + Q - i])
        :: else -> assert(!running[P] && !running[Q])
        fi
    }
    running[i] = 0;
    /* F2, under its own lock */
    atomic {
        handled[i] = 1;
        k = 0;
        do
        :: k < N -> if :: registered[k * N + i] -> cnt[k]-- :: else -> skip fi; k++
        :: else -> break
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
        :: else -> break
        od;
        lastBarrier = b;
        linked[b] = 1;
        count++
    }
    j = 0;
    do
    :: j < N -> if :: edge[b * N + j] -> register(b, j) :: else -> skip fi; j++
    :: else -> break
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
        count++
    }
#endif
}

proctype AddX() {
    byte behind = NONE;
    /* A3: the queue's lock; the edge to a pending barrier counted there (R9) */
    atomic {
        linked[X] = 1;
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

init {
    linked[A] = 1;
    atomic {
        run Run(A); run Run(P); run Run(Q); run Run(X);
        run AddBarrier(P); run AddBarrier(Q); run AddX()
    }
    timeout -> assert(finished[A] && finished[P] && finished[Q] && finished[X])
}
