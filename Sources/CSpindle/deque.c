/*
 * deque.c — the per-worker Chase–Lev work-stealing deque.
 *
 * References
 *   D. Chase, Y. Lev. "Dynamic Circular Work-Stealing Deque." SPAA 2005.
 *   N. M. Lê, A. Pop, A. Cohen, F. Zappa Nardelli. "Correct and Efficient Work-Stealing
 *     for Weak Memory Models." PPoPP 2013. Figure 1 gives the C11 orderings used here;
 *     the comments cite its lines as "Lê push/take/steal".
 *   crossbeam-deque (Rust) for the ThreadSanitizer variant and the bounded-ring reading.
 *
 * Invariants
 *   I1  `top` only increases (thieves and the owner's overflow CAS it forward); `bottom`
 *       is written only by the owner. Indices are 64-bit and never wrap in practice
 *       (2^63 pushes at 1 ns each is ~292 years).
 *   I2  The live items are buf[top .. bottom) modulo the capacity; bottom - top <= cap.
 *   I3  An item is handed out exactly once: by a successful CAS on `top` (thieves, the
 *       owner's take of the last item, the owner's overflow), or by the owner's take
 *       of an item strictly above `top`, which no thief can reach (the thief's CAS would
 *       have to move `top` past `bottom`, and take lowered `bottom` first, with a full
 *       fence between, so one of the two sees the other).
 *   I4  A slot is only overwritten by the owner, at index `bottom`, and only when
 *       bottom - top < cap for a `top` it has observed. A thief that read slot t before
 *       its CAS either wins the CAS (then nobody overwrote slot t: that needs top > t)
 *       or loses it and discards what it read.
 *
 * Model: Tests/Models/deque.pml checks I3 and I4 over every interleaving of the owner's
 * pushes (the overflow included) and takes with two thieves, on a ring that fills and
 * wraps; its mutants show what each CAS and the take's order of `bottom` and `top` are
 * for (scripts/model-check.sh).
 *
 * Bounded ring, not a growable buffer (a choice worth arguing)
 *   Chase–Lev's original deque grows by copying into a bigger array, and the old array
 *   can be freed only once no thief can still be reading it: that needs safe memory
 *   reclamation (epochs in crossbeam, hazard pointers, or never freeing). A full deque
 *   also means the owner has spawned far more work than the pool can steal, and that
 *   work is better shared than hoarded. So, like tokio's local queue and Go's runq, the
 *   ring has a fixed power-of-two capacity and, when the owner finds it full, it claims
 *   the older half with one CAS on `top` — exactly as a thief would, so I3 covers it —
 *   and moves those tasks to the injector in one linked batch, where any worker can
 *   take them. The cost is one injector push per cap/2 overflowing spawns; the gain is
 *   no reclamation scheme, no unbounded memory per worker and better load balance.
 *   The overflow keeps the newest half local, which is what the owner's LIFO order
 *   will run next anyway (locality), and sends the oldest — typically the biggest
 *   subtrees of a divide-and-conquer — where idle workers find them.
 *
 * The owner's push and take, the hot path of every spawn and join, are inline in
 * deque_owner.h (with their comments); this file keeps initialisation, the overflow,
 * and the thieves' side.
 *
 * Thieves take one item per CAS. Batched steals (several items with one CAS) would race
 * with the owner's fence-only take of items above `top` (I3); cross-node batch stealing
 * is therefore done by repeating single steals.
 */
#include "internal.h"

#include <stdlib.h>

int spindle_deque_init(spindle_deque *d, uint32_t capacity, void *(*alloc)(size_t, void *),
                       void *alloc_ctx) {
    uint64_t cap = 4;
    while (cap < capacity) cap <<= 1;
    size_t bytes = (size_t)cap * sizeof(_Atomic(spindle_task *));
    void *mem = alloc ? alloc(bytes, alloc_ctx) : malloc(bytes);
    if (!mem) return -1;
    d->buf = mem;
    for (uint64_t i = 0; i < cap; i++) atomic_init(&d->buf[i], NULL);
    d->mask = (int64_t)cap - 1;
    atomic_init(&d->top, 0);
    atomic_init(&d->bottom, 0);
    return 0;
}

void spindle_deque_free(spindle_deque *d, void (*dealloc)(void *, size_t, void *),
                        void *alloc_ctx) {
    if (!d->buf) return; /* never initialised (creation failed before it) */
    if (dealloc)
        dealloc((void *)d->buf, (size_t)(d->mask + 1) * sizeof(_Atomic(spindle_task *)), alloc_ctx);
    else
        free((void *)d->buf);
    d->buf = NULL;
}

/* Claims the older half of a full ring with one CAS on `top` and hands it to the
 * injector. Returns how many tasks moved, 0 if a thief got in first (the caller then
 * re-reads: the ring may no longer be full). */
static uint32_t deque_overflow(spindle_deque *d, int64_t t, int64_t b, spindle_injector *q) {
    int64_t half = (b - t) / 2;
    if (half <= 0) return 0;
    /* Claim first, read after. A thief must read its slot before its CAS because the
     * owner may overwrite the slot once `top` has moved; but the owner is the only
     * writer of slots and is busy here, so after a successful CAS the claimed slots
     * cannot change. Reading (and above all *linking*) before the CAS would be wrong:
     * if the CAS then lost to a thief, we would have written the link field of a task
     * that thief now owns — and may already have run and freed.
     * seq_cst like the thieves' CAS (Lê steal line 10): it takes its place in the single
     * total order with the thieves' CASes and the owner's take fence, which is what
     * makes "exactly one winner per index" (I3) hold for the claimed range. */
    if (!atomic_compare_exchange_strong_explicit(&d->top, &t, t + half, memory_order_seq_cst,
                                                 memory_order_relaxed))
        return 0;
    /* Relaxed: we wrote these slots ourselves. */
    spindle_task *first = atomic_load_explicit(&d->buf[t & d->mask], memory_order_relaxed);
    spindle_task *prev = first;
    for (int64_t i = t + 1; i < t + half; i++) {
        spindle_task *cur = atomic_load_explicit(&d->buf[i & d->mask], memory_order_relaxed);
        /* The chain is ours alone until the injector push publishes it (release there). */
        atomic_store_explicit(spindle_task_link(prev), cur, memory_order_relaxed);
        prev = cur;
    }
    spindle_injector_push_chain(q, first, prev, half);
    return (uint32_t)half;
}

uint32_t spindle_deque_push_full(spindle_deque *d, spindle_task *t, spindle_injector *overflow) {
    uint32_t moved = 0;
    /* Only the owner writes `bottom`, so relaxed reads its own value. */
    int64_t b = atomic_load_explicit(&d->bottom, memory_order_relaxed);
    for (;;) {
        /* Acquire, as in spindle_deque_push (deque_owner.h). */
        int64_t tp = atomic_load_explicit(&d->top, memory_order_acquire);
        if (b - tp <= d->mask) break;
        moved += deque_overflow(d, tp, b, overflow);
    }
    spindle_deque_push_slot(d, t, b);
    return moved;
}

spindle_steal_result spindle_deque_steal(spindle_deque *d, spindle_task **out) {
#if SPINDLE_TSAN
    int64_t t = atomic_load_explicit(&d->top, memory_order_seq_cst);
    int64_t b = atomic_load_explicit(&d->bottom, memory_order_seq_cst);
#else
    /* Lê steal line 2: acquire pairs with other thieves' (and the owner's) CAS on top. */
    int64_t t = atomic_load_explicit(&d->top, memory_order_acquire);
    /* Lê steal line 3: the full fence orders our read of top before our read of bottom
     * and pairs with the fence in take (see there). */
    atomic_thread_fence(memory_order_seq_cst);
    /* Lê steal line 4: acquire pairs with the release fence in push, making the slot and
     * the task's contents visible. */
    int64_t b = atomic_load_explicit(&d->bottom, memory_order_acquire);
#endif
    if (t >= b) return SPINDLE_STEAL_EMPTY;
    /* Lê steal line 6: relaxed; the slot cannot be overwritten before our CAS decides
     * (I4), and if the CAS fails we throw the value away. */
    spindle_task *x = atomic_load_explicit(&d->buf[t & d->mask], memory_order_relaxed);
    /* Lê steal line 7: seq_cst CAS; the single winner for index t gets the item. */
    if (!atomic_compare_exchange_strong_explicit(&d->top, &t, t + 1, memory_order_seq_cst,
                                                 memory_order_relaxed))
        return SPINDLE_STEAL_RETRY;
    *out = x;
    return SPINDLE_STEAL_OK;
}

int64_t spindle_deque_len(spindle_deque *d) {
    /* Relaxed: a hint for heuristics and stats; the deque's operations decide. */
    int64_t b = atomic_load_explicit(&d->bottom, memory_order_relaxed);
    int64_t t = atomic_load_explicit(&d->top, memory_order_relaxed);
    return b > t ? b - t : 0;
}
