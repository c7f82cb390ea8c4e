/*
 * nodes.pml — task nodes coming back to the heap that allocated them (nodes.c, N1-N4):
 * the remote stack that other threads push batches onto and only the heap's owner
 * empties, and a heap abandoned when its thread exits and adopted by the next thread,
 * with pushes still arriving.
 *
 * What is checked, for every interleaving of the heap's first owner, two threads that
 * free its nodes and the thread that adopts the heap: no node is held by two threads at
 * once, and none is lost. Once everything has stopped and the adopter has taken all
 * the heap has, it holds every node.
 *
 * The owner allocates three nodes and gives two to one freeing thread (one now, one
 * after it has freed and allocated it again) and one to the other; it allocates once
 * more, which may take what has come back, frees what it got, and exits. A freeing
 * thread gathers the owner's nodes in a batch and pushes it with one CAS when the batch
 * is done or when it exits (N4). The adopter takes the heap off the abandoned list under
 * its lock (N3) and allocates from it, before and after the frees arrive.
 *
 * Four mutants must each make the model find a node held twice or lost
 * (scripts/model-check.sh checks that they do):
 *   -DMUTANT_PUSH_STORE       a push links its batch with a plain store, not a CAS;
 *   -DMUTANT_TAKE_LOAD_STORE  the owner empties the remote stack with a load and a store
 *                             of NULL, not one exchange;
 *   -DMUTANT_NO_EXIT_FLUSH    a freeing thread exits without pushing its last batch;
 *   -DMUTANT_HEAP_UNLOCKED    the adopter takes the heap off the abandoned list before
 *                             its first owner has put it there.
 */
#define NODES 3

byte next[NODES + 1];    /* a node's list link; 0 is NULL */
byte remote = 0;         /* the heap's remote stack (N2) */
byte remote_count = 0;
byte lhead = 0;          /* the heap's local list: its owner's only (N1) */
bit lock = 0;            /* abandoned_lock */
bit abandoned = 0;       /* the heap is on the abandoned list */
byte held[NODES + 1];    /* threads holding each node */
byte give1 = 0, give1b = 0, give2 = 0;   /* nodes handed to the freeing threads */
byte freers_done = 0;
bit owner_done = 0;
bit adopter_done = 0;

inline acquire() { atomic { lock == 0 -> lock = 1 } }
inline release() { lock = 0 }

inline hold(x) {
    held[x]++;
    assert(held[x] == 1)
}

/* push_remote: a chain first..last of n nodes onto the remote stack (N2). */
inline push_remote(first, last, n) {
#ifdef MUTANT_PUSH_STORE
    h = remote;
    next[last] = h;
    remote = first;
#else
    do
    :: h = remote;
       next[last] = h;
       atomic {
           if
           :: remote == h -> remote = first; ok = 1
           :: else -> ok = 0
           fi
       };
       if
       :: ok -> break
       :: else -> skip
       fi
    od;
#endif
    atomic { remote_count = remote_count + n };
    h = 0
}

/* spindle_task_alloc on the heap's owner: the local list, else what came back (taken
 * whole, the first node for the caller), else nothing (a carve, not modelled). */
inline alloc(out) {
    if
    :: lhead != 0 -> out = lhead; lhead = next[out]; next[out] = 0
    :: else ->
       if
       :: remote == 0 -> out = 0
       :: else ->
#ifdef MUTANT_TAKE_LOAD_STORE
          out = remote;
          remote = 0;
#else
          atomic { out = remote; remote = 0 };
#endif
          atomic { remote_count = 0 };
          lhead = next[out];
          next[out] = 0
       fi
    fi;
    if
    :: out != 0 -> hold(out)
    :: else -> skip
    fi
}

/* spindle_task_free of one of its own nodes, on the owner: onto the local list. */
inline free_local(x) {
    held[x]--;
    next[x] = lhead;
    lhead = x
}

/* spindle_task_free on another thread: into this thread's batch for the owner (N4). */
inline free_batched(x) {
    held[x]--;
    next[x] = bfirst;
    if
    :: blast == 0 -> blast = x
    :: else -> skip
    fi;
    bfirst = x;
    bn++
}

inline flush() {
    if
    :: bn > 0 -> push_remote(bfirst, blast, bn); bfirst = 0; blast = 0; bn = 0
    :: else -> skip
    fi
}

active proctype Owner() {
    byte x;
    /* Three nodes carved from its slab. */
    hold(1); hold(2); hold(3);
    /* Handed over: the freeing threads hold them now. */
    give1 = 1;
    give2 = 2;
    free_local(3);
    alloc(x);        /* node 3 again, from the local list */
    give1b = x;
    alloc(x);        /* whatever has come back, if anything */
    if
    :: x != 0 -> free_local(x)
    :: else -> skip
    fi;
    /* heap_exit: no batch of its own to flush; the heap goes on the abandoned list. */
    acquire();
    abandoned = 1;
    release();
    owner_done = 1
}

active proctype Freer1() {
    byte bfirst = 0, blast = 0, bn = 0, h;
    bit ok;
    give1 != 0;
    free_batched(give1);
    /* A batch may go now, or with the next node. */
    if
    :: flush()
    :: skip
    fi;
    give1b != 0;
    free_batched(give1b);
#ifndef MUTANT_NO_EXIT_FLUSH
    flush();
#endif
    freers_done++
}

active proctype Freer2() {
    byte bfirst = 0, blast = 0, bn = 0, h;
    bit ok;
    give2 != 0;
    free_batched(give2);
    flush();
    freers_done++
}

/* The adopter allocates until the heap has nothing left. */
inline take_all() {
    do
    :: alloc(x);
       if
       :: x != 0 -> got++
       :: else -> break
       fi
    od
}

/* The next thread that needs a heap adopts this one (N3), and allocates from it: some
 * now, the rest once every free has arrived. */
active proctype Adopter() {
    byte x, got = 0;
#ifdef MUTANT_HEAP_UNLOCKED
    skip;
#else
    atomic { abandoned == 1 && lock == 0 -> lock = 1 };
    abandoned = 0;
    release();
#endif
    do
    :: alloc(x);
       if
       :: x != 0 -> got++
       :: else -> break
       fi
    :: break
    od;
    freers_done == 2;
    take_all();
    (owner_done);
    /* Nothing more can arrive: the heap's nodes are all here, each held once. */
    take_all();
    assert(got == NODES && held[1] == 1 && held[2] == 1 && held[3] == 1);
    adopter_done = 1
}

/* Once nothing can move, the adopter has got that far: no thread is stuck. */
active proctype Final() {
    timeout -> assert(adopter_done)
}
