/*
 * deque_owner.h — the owner's side of the Chase–Lev deque (deque.c): push and take.
 *
 * Inline, because they are the whole cost of a fork that nobody steals, where a call
 * each for push, pop and the wake-up check would be a large share of a `join`. The
 * invariants (I1–I4) and references are at the top of deque.c; "Lê push/take" cite
 * the lines of Figure 1 of Lê, Pop, Cohen and Zappa Nardelli (PPoPP 2013).
 */
#ifndef SPINDLE_DEQUE_OWNER_H
#define SPINDLE_DEQUE_OWNER_H

/* Writes `t` at index `b` and publishes it. Owner only, with room checked. */
static inline void spindle_deque_push_slot(spindle_deque *d, spindle_task *t, int64_t b) {
    /* Lê push line 7: the slot write itself may be relaxed; it is published by the
     * release below together with everything the caller wrote into the task. */
    atomic_store_explicit(&d->buf[b & d->mask], t, memory_order_relaxed);
#if SPINDLE_TSAN
    /* TSan: a release store is the fence-free equivalent of fence(release)+relaxed store. */
    atomic_store_explicit(&d->bottom, b + 1, memory_order_release);
#else
    /* Lê push lines 8-9: the release fence orders the slot write (and the task's
     * contents) before the new `bottom`; it pairs with the acquire load of `bottom` in
     * steal. On x86 it compiles to nothing. */
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&d->bottom, b + 1, memory_order_relaxed);
#endif
}

/* Owner only. When full, moves the older half to `overflow` (deque.c) and returns how
 * many it moved (0 when there was room). */
uint32_t spindle_deque_push_full(spindle_deque *d, spindle_task *t, spindle_injector *overflow);

/* Owner only: pushes `t` if the ring has room, and says whether it did. */
static inline bool spindle_deque_try_push(spindle_deque *d, spindle_task *t) {
    /* Lê push line 2: only the owner writes `bottom`, so relaxed reads its own value. */
    int64_t b = atomic_load_explicit(&d->bottom, memory_order_relaxed);
    /* Lê push line 3: acquire pairs with the thieves' CAS on `top` (seq_cst, so also
     * release): once we see top advanced past a slot, the thief's read of that slot
     * happened-before, and we may overwrite it (I4). */
    int64_t tp = atomic_load_explicit(&d->top, memory_order_acquire);
    if (__builtin_expect(b - tp > d->mask, 0)) return false;
    spindle_deque_push_slot(d, t, b);
    return true;
}

static inline uint32_t spindle_deque_push(spindle_deque *d, spindle_task *t,
                                          spindle_injector *overflow) {
    if (__builtin_expect(spindle_deque_try_push(d, t), 1)) return 0;
    return spindle_deque_push_full(d, t, overflow);
}

/* Owner only: LIFO. */
static inline spindle_task *spindle_deque_pop(spindle_deque *d) {
    /* Lê take line 2. */
    int64_t b = atomic_load_explicit(&d->bottom, memory_order_relaxed) - 1;
#if SPINDLE_TSAN
    /* TSan: a seq_cst exchange + seq_cst load give the same store->load ordering as the
     * relaxed store + seq_cst fence below, in a form TSan understands. */
    atomic_exchange_explicit(&d->bottom, b, memory_order_seq_cst);
    int64_t t = atomic_load_explicit(&d->top, memory_order_seq_cst);
#else
    /* Lê take lines 3-5: announce the take by lowering `bottom`, then a full fence so
     * that the store to `bottom` is ordered before the load of `top` (a store->load
     * ordering only a seq_cst fence gives). It pairs with the seq_cst fence in steal:
     * either the thief sees our lowered bottom and backs off, or we see its raised top
     * and fall into the CAS race for the last item (I3). */
    atomic_store_explicit(&d->bottom, b, memory_order_relaxed);
    atomic_thread_fence(memory_order_seq_cst);
    int64_t t = atomic_load_explicit(&d->top, memory_order_relaxed);
#endif
    if (t > b) {
        /* Empty: restore bottom (Lê take line 16). Relaxed: only we write it. */
        atomic_store_explicit(&d->bottom, b + 1, memory_order_relaxed);
        return NULL;
    }
    /* Lê take line 7: we wrote this slot ourselves. */
    spindle_task *x = atomic_load_explicit(&d->buf[b & d->mask], memory_order_relaxed);
    if (t == b) {
        /* The last item: race the thieves for it with their own CAS (Lê take lines
         * 9-12). seq_cst: part of the total order with the thieves' CASes. */
        if (!atomic_compare_exchange_strong_explicit(&d->top, &t, t + 1, memory_order_seq_cst,
                                                     memory_order_relaxed))
            x = NULL;
        atomic_store_explicit(&d->bottom, b + 1, memory_order_relaxed);
    }
    return x;
}

#endif
