/*
 * injector.c — the queue for work submitted from outside the pool (and for the overflow
 * of full deques).
 *
 * Algorithm: Dmitry Vyukov's intrusive non-blocking MPSC node-based queue
 * (1024cores.net, "Intrusive MPSC node-based queue"), with a stub node.
 *   - Producers: one atomic add on `len` (the reservation, J3), one atomic exchange on
 *     `tail`, then one store linking the previous node to the new one. Wait-free, no
 *     lock, no allocation (the node is the task).
 *   - Consumers: the algorithm admits one consumer at a time. Workers take turns with a
 *     try-lock (`consumer`): a worker that finds the flag taken does not wait, it goes
 *     on to steal instead — somebody is already draining the injector. The holder
 *     takes a batch, so the try-lock is taken once per batch, not once per task.
 *
 * Invariants
 *   J1  Every pushed node is reachable from `head` through links once its producer's
 *       link store has landed; between a producer's exchange and its link store the
 *       chain is cut at that point ("a producer is mid-push") and the consumer stops
 *       there and reports nothing more for now. The producer notifies the pool *after*
 *       its link store (pool.c), so a worker that gave up at the cut is woken again.
 *   J2  `head` and the stub's re-insertion are touched only by the try-lock's holder.
 *   J3  `len` counts reserved minus popped nodes. A producer reserves (counts its nodes
 *       in) before it links them, and a consumer subtracts only after popping, so every
 *       node queued or on its way in is counted: `len` is an upper bound, and 0 means
 *       nothing is queued and no push is in flight. It may read high (a reservation
 *       not yet linked, a pop not yet subtracted, a refused submission taking its
 *       reservation back), so it sizes batches and answers "maybe non-empty", and a
 *       shutdown reads 0 as "no outside submitter in flight" (pool.c, step 3).
 *
 * Model: Tests/Models/injector.pml checks J1-J2 over every interleaving of two producers
 * (single nodes and a chain) and two consumers taking batches: each node handed out once
 * and in its producer's order, and a pop that finds nothing after every push has landed
 * means the queue is empty.
 *
 * Why not a mutex-protected ring (tokio's Inject) or crossbeam's segmented Injector?
 * A mutex on the submit path serialises every submitter behind the lock's holder, a
 * stall the lock-free path never has; crossbeam's Injector
 * needs block allocation and reclamation. The intrusive queue needs neither, at the
 * cost of the J1 window (a producer preempted between its two steps delays the tasks
 * behind it until it resumes — they are never lost).
 */
#include "internal.h"

void spindle_injector_init(spindle_injector *q) {
    atomic_init(spindle_task_link(&q->stub), NULL);
    q->stub.run = NULL;
    atomic_init(&q->tail, &q->stub);
    atomic_init(&q->len, 0);
    atomic_flag_clear(&q->consumer);
    q->head = &q->stub;
}

void spindle_injector_link(spindle_injector *q, spindle_task *first, spindle_task *last) {
    /* Relaxed: `last` is not yet reachable by anyone; the release below publishes it. */
    atomic_store_explicit(spindle_task_link(last), NULL, memory_order_relaxed);
    /* acq_rel exchange: producers serialise on `tail`. Acquire so that our store into
     * prev's link is ordered after prev's producer initialised prev; release so the
     * consumer's acquire load of `tail` (in the mid-push check) sees a complete chain
     * up to `last`. */
    spindle_task *prev = atomic_exchange_explicit(&q->tail, last, memory_order_acq_rel);
    /* Release: publishes the chain (and the tasks' contents, written before the call)
     * to the consumer, whose acquire load of prev's link pairs with it. */
    atomic_store_explicit(spindle_task_link(prev), first, memory_order_release);
}

/* One node off the front; NULL when empty or cut (J1). Caller holds the try-lock. */
static spindle_task *injector_pop_one(spindle_injector *q) {
    spindle_task *head = q->head;
    /* Acquire pairs with the producer's release store of this link. */
    spindle_task *next = atomic_load_explicit(spindle_task_link(head), memory_order_acquire);
    if (head == &q->stub) {
        if (!next) return NULL;
        q->head = next;
        head = next;
        next = atomic_load_explicit(spindle_task_link(next), memory_order_acquire);
    }
    if (next) {
        q->head = next;
        return head;
    }
    /* `head` is the last linked node. If it is also `tail`, re-insert the stub behind it
     * so that `head` can be handed out without emptying the list; otherwise a producer
     * is mid-push behind it (J1). Acquire pairs with the producers' exchange. */
    spindle_task *tail = atomic_load_explicit(&q->tail, memory_order_acquire);
    if (tail != head) return NULL;
    spindle_injector_link(q, &q->stub, &q->stub);
    next = atomic_load_explicit(spindle_task_link(head), memory_order_acquire);
    if (next) {
        q->head = next;
        return head;
    }
    return NULL; /* another producer slipped in before the stub: cut, try later */
}

uint32_t spindle_injector_pop_batch(spindle_injector *q, spindle_task **out, uint32_t max) {
    /* Cheap pre-check without touching the consumer flag's cache line. */
    if (!spindle_injector_maybe_nonempty(q)) return 0;
    /* Acquire pairs with the previous holder's release clear: its updates of `head` and
     * of the stub's link happen-before ours (J2). */
    if (atomic_flag_test_and_set_explicit(&q->consumer, memory_order_acquire)) return 0;
    uint32_t n = 0;
    while (n < max) {
        spindle_task *t = injector_pop_one(q);
        if (!t) break;
        out[n++] = t;
    }
    /* Release: hands `head` and the stub over to the next holder. */
    atomic_flag_clear_explicit(&q->consumer, memory_order_release);
    if (n) atomic_fetch_sub_explicit(&q->len, (int64_t)n, memory_order_relaxed);
    return n;
}

bool spindle_injector_maybe_nonempty(spindle_injector *q) {
    /* Relaxed hint (J3). A push that has bumped `len` reads as non-empty even before it
     * is linked, which errs on the side of looking again, never of sleeping on work. */
    return atomic_load_explicit(&q->len, memory_order_relaxed) > 0;
}
