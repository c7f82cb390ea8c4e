/*
 * deque.pml — the per-worker work-stealing deque (deque.c, deque_owner.h): the owner's
 * push, with the bounded ring's overflow of its older half, and take, against thieves'
 * steals.
 *
 * What is checked: every item pushed is handed out exactly once (I3), by the owner's
 * take, a thief's steal or the overflow to the injector, never twice and never lost,
 * for every interleaving of the owner's pushes and takes, in any order, with two
 * thieves of three attempts each. The ring holds 4 items and the owner pushes 6, so the
 * ring fills, overflows and wraps: a slot is reused while thieves may still be reading
 * it (I4).
 *
 * Spin explores sequentially consistent executions. The deque's orderings (deque.c's
 * comments, after Lê et al., PPoPP 2013) are what make its C11 executions behave so for
 * these steps; the one reordering a weaker order would allow that matters most, the
 * take's load of `top` before its store of `bottom` (what the take's seq_cst fence
 * forbids), is a mutant below. What is checked here is the algorithm that those
 * orderings then carry.
 *
 * Abstractions:
 *   - An item is its number, 1..N; a slot holds a number. Handing out is counted per
 *     item (`handed`).
 *   - The overflow's batch goes to the injector, which is not modelled further: the
 *     items it claims count as handed out there.
 *
 * Five mutants must each make the model find an item handed out twice or lost
 * (scripts/model-check.sh checks that they do):
 *   -DMUTANT_TAKE_NO_CAS          the owner takes the last item without racing the
 *                                 thieves' CAS for it;
 *   -DMUTANT_TAKE_LOAD_FIRST      the take reads `top` before it lowers `bottom`;
 *   -DMUTANT_STEAL_READ_AFTER     a thief reads its slot after its CAS, not before;
 *   -DMUTANT_OVERFLOW_NO_CAS      the overflow claims the older half with a plain store;
 *   -DMUTANT_PUSH_NO_ROOM         the push writes its slot without checking for room.
 */
#define CAP 4
#define MASK 3
#define N 6
#define THIEVES 2
#define TRIES 3

short top = 0;       /* I1: only increases; signed, as in deque.c */
short bottom = 0;    /* written by the owner only */
byte buf[CAP];
byte handed[N + 1];  /* how many times each item was handed out */
byte done = 0;       /* processes finished */

inline handout(x) {
    handed[x]++;
    assert(handed[x] == 1)
}

/* deque_overflow: claims the older half with one CAS on `top`, then reads the claimed
 * slots, which only the owner writes. */
inline overflow(t, b) {
    half = (b - t) / 2;
    if
    :: half > 0 ->
#ifdef MUTANT_OVERFLOW_NO_CAS
       won = (top == t);
       top = t + half;
#else
       atomic { if :: top == t -> top = t + half; won = 1 :: else -> won = 0 fi };
#endif
       /* Only the owner writes slots, and it is here: one step. */
       d_step {
           if
           :: won ->
              i = t;
              do
              :: i < t + half -> handout(buf[i & MASK]); i++
              :: else -> break
              od
           :: else -> skip
           fi;
           i = 0; won = 0; half = 0
       }
    :: else -> half = 0
    fi
}

/* spindle_deque_push and spindle_deque_push_full. */
inline push(v) {
    b = bottom;
#ifndef MUTANT_PUSH_NO_ROOM
    do
    :: t = top;
       if
       :: b - t <= MASK -> break
       :: else -> overflow(t, b)
       fi
    od;
#endif
    buf[b & MASK] = v;
    bottom = b + 1;
    d_step { b = 0; t = 0 }
}

/* spindle_deque_pop: the owner's LIFO take. */
inline take() {
    b = bottom - 1;
#ifdef MUTANT_TAKE_LOAD_FIRST
    t = top;
    bottom = b;
#else
    bottom = b;
    t = top;
#endif
    if
    :: t > b -> bottom = b + 1; drained = 1
    :: else ->
       drained = 0;
       x = buf[b & MASK];
       if
       :: t == b ->
          /* The last item: the thieves' race, with their CAS. */
#ifdef MUTANT_TAKE_NO_CAS
          skip;
#else
          atomic { if :: top == t -> top = t + 1 :: else -> x = 0 fi };
#endif
          bottom = b + 1
       :: else -> skip
       fi;
       if
       :: x != 0 -> handout(x)
       :: else -> skip
       fi
    fi;
    d_step { b = 0; t = 0; x = 0 }
}

active proctype Owner() {
    short b, t, half, i;
    byte x, next = 1;
    bit won, drained;
    /* Pushes and takes in every order. */
    do
    :: next <= N -> push(next); next++
    :: take()
    :: next > N -> break
    od;
    /* Then takes until the deque is empty. */
    do
    :: take(); if :: drained -> break :: else -> skip fi
    od;
    done++
}

active [THIEVES] proctype Thief() {
    short t, b;
    byte x, tries = TRIES;
    do
    :: tries == 0 -> break
    :: tries > 0 ->
       tries--;
       t = top;
       b = bottom;
       if
       :: t < b ->
#ifdef MUTANT_STEAL_READ_AFTER
          atomic { if :: top == t -> top = t + 1; x = 1 :: else -> x = 0 fi };
          if :: x -> x = buf[t & MASK]; handout(x) :: else -> skip fi
#else
          x = buf[t & MASK];
          atomic { if :: top == t -> top = t + 1; handout(x) :: else -> skip fi }
#endif
       :: else -> skip
       fi;
       d_step { t = 0; b = 0; x = 0 }
    od;
    done++
}

/* Once nothing can move: everyone has finished, and every item was handed out exactly
 * once. */
active proctype Final() {
    byte i = 1;
    timeout -> assert(done == THIEVES + 1);
    do
    :: i <= N -> assert(handed[i] == 1); i++
    :: else -> break
    od
}
