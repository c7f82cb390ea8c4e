/*
 * injector.pml — the injector, Vyukov's intrusive MPSC queue with a stub node, taken in
 * turns by consumers through a try-lock: every node pushed is handed out exactly once,
 * each producer's in the order it pushed them, and none is stranded (Sources/CSpindle/
 * injector.c, J1-J2: spindle_injector_link, injector_pop_one,
 * spindle_injector_pop_batch).
 *
 * Node 0 is the stub; nodes 1 to 4 are tasks. Two producers push from outside the
 * pool: one pushes node 1 and then node 2, each alone (a submit), the other the chain
 * 3 -> 4 in one link (a deque's overflow, spindle_injector_push_chain). Two consumers
 * (workers) take batches of up to two:
 *   a push (`spindle_injector_link`): the last node's link cleared; one exchange on
 *     `tail`; one store linking the previous tail to the first node;
 *   a batch: the try-lock (a test-and-set; a consumer that finds it taken goes away),
 *     then pops until one finds nothing or the batch is full, then the lock released;
 *   a pop (`injector_pop_one`): past the stub if it is at the head; a node with a
 *     successor is handed out; the last linked node is handed out only if it is also
 *     `tail`, after the stub has been pushed behind it and is seen linked there; else
 *     the chain is cut by a producer mid-push and the pop finds nothing (J1).
 * The producers' reservations on `len` and the consumers' pre-check only decide when to
 * look, and are left out: the consumers here look until every node is out.
 *
 * What is checked: a node is handed out once, never the stub, and each producer's nodes
 * in push order; a pop that finds nothing after both producers' link stores had landed
 * (read before it began) means every node is out (J1: only a push in progress cuts the
 * chain).
 *
 * Mutants (scripts/model-check.sh makes sure each fails):
 *   -DMUTANT_NO_TAIL_CHECK    the last linked node is handed out without the stub
 *                             behind it.
 *   -DMUTANT_NO_STUB_LOOK     after pushing the stub, the node is handed out without
 *                             looking that the stub is linked behind it.
 *   -DMUTANT_NO_TRYLOCK       consumers pop without the try-lock.
 *   -DMUTANT_LINK_FIRST       a push links the previous tail before its exchange
 *                             (reading `tail`, then linking, then exchanging).
 */
#define STUB 0
#define NODES 4
#define NIL 255

byte link[NODES + 1];   /* each node's link; initialised NIL in init */
byte tail = STUB;
byte head = STUB;       /* the try-lock holder's */
bit consumer = 0;       /* the try-lock */
bit out[NODES + 1];     /* ghost: handed out */
byte nout = 0;
byte landed = 0;        /* ghost: producers whose link stores have all landed */
byte lastA = 0;         /* ghost: the last of producer A's nodes handed out */
bit outChainFirst = 0;  /* ghost: node 3 handed out */

/* spindle_injector_link(first, last); `prev` is the caller's local. */
inline push(first, last) {
    link[last] = NIL;
#ifdef MUTANT_LINK_FIRST
    prev = tail;
    link[prev] = first;
    tail = last;
#else
    atomic { prev = tail; tail = last };             /* the exchange */
    link[prev] = first;                              /* the link store */
#endif
}

proctype ProducerA() {
    byte prev;
    push(1, 1);
    push(2, 2);
    landed++
}

proctype ProducerB() {
    byte prev;
    link[3] = 4;                                     /* the chain, made privately */
    push(3, 4);
    landed++
}

/* injector_pop_one into `got` (NIL: nothing). */
inline popOne() {
    h = head;
    nx = link[h];
    got = NIL;
    if
    :: h == STUB && nx == NIL -> goto popped
    :: h == STUB && nx != NIL -> head = nx; h = nx; nx = link[nx]
    :: else -> skip
    fi;
    if
    :: nx != NIL -> head = nx; got = h
    :: else ->
#ifdef MUTANT_NO_TAIL_CHECK
       got = h;
       head = STUB;
#else
       t = tail;
       if
       :: t != h -> skip                             /* cut: a producer mid-push */
       :: else ->
          push(STUB, STUB);                          /* the stub behind it */
#ifdef MUTANT_NO_STUB_LOOK
          head = STUB;
          got = h
#else
          nx = link[h];
          if
          :: nx != NIL -> head = nx; got = h
          :: else -> skip                            /* another push slipped in first */
          fi
#endif
       fi
#endif
    fi;
popped:
    skip
}

inline handOut(n) {
    atomic {
        assert(n != STUB && !out[n]);                /* once, never the stub */
        out[n] = 1;
        nout++;
        if
        :: n == 1 || n == 2 -> assert(n > lastA); lastA = n       /* push order */
        :: n == 3 -> outChainFirst = 1
        :: n == 4 -> assert(outChainFirst)
        :: else -> skip
        fi
    }
}

proctype Consumer() {
    byte h, nx, t, got, prev, k, seen;
    bit mine;
    do
    :: nout < NODES ->
#ifdef MUTANT_NO_TRYLOCK
       mine = 1;
#else
       atomic {
          if
          :: consumer == 0 -> consumer = 1; mine = 1
          :: else -> mine = 0
          fi
       };
#endif
       if
       :: mine ->
          k = 0;
          do
          :: k < 2 ->
             seen = landed;
             popOne();
             if
             :: got != NIL -> handOut(got); k++
             :: else ->
                /* J1: with every push landed before this pop, nothing found is empty. */
                assert(seen < 2 || nout == NODES);
                break
             fi
          :: else -> break
          od;
#ifndef MUTANT_NO_TRYLOCK
          consumer = 0
#else
          skip
#endif
       :: else -> skip
       fi
    :: else -> break
    od
}

init {
    byte i = 0;
    atomic {
        do
        :: i <= NODES -> link[i] = NIL; i++
        :: else -> break
        od;
        run ProducerA();
        run ProducerB();
        run Consumer();
        run Consumer()
    }
}
