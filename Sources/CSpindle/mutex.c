/*
 * mutex.c — the lock behind the Swift façade's queues.
 *
 * A three-state futex mutex (Drepper, "Futexes Are Tricky", mutex #3): 0 unlocked,
 * 1 locked, 2 locked and possibly contended. Lock is one CAS when free; unlock is one
 * exchange, plus a futex wake only when someone may be sleeping.
 *
 * Why not Synchronization.Mutex: on Linux it is a priority-inheritance futex
 * (FUTEX_LOCK_PI). Under the contention an operation queue sees — the thread adding
 * operations and every worker finishing them take the same lock, each for well under a
 * microsecond — PI waiters go through the kernel's rt_mutex path and sleep, and a queue
 * under load spends more time in context switches than in its own code. Here a
 * contender first spins briefly,
 * since the holder is almost always about to release, and only then sleeps.
 * Rejected: a pure spinlock (a preempted holder on a 2-CPU VM would make the others
 * burn their whole slice) and pthread's adaptive mutex (its spin is tuned for long
 * sections and it adds a function-pointer-sized struct to every queue). Also rejected:
 * a count of sleepers in the word, so that an unlock wakes only when one sleeps and a
 * contender keeps spinning while none does. With two threads taking the lock in turn,
 * as a serial queue's adding thread and its worker do, a woken sleeper stays counted
 * until it has the lock, and every unlock in between wakes again: more system calls
 * than the spurious wake of mutex #3, not fewer.
 *
 * Invariants
 *   M1  state != 0 exactly while some thread holds the lock.
 *   M2  A thread sleeps only on state == 2, and whoever releases a lock whose state was
 *       2 wakes one sleeper; a woken thread re-acquires with state 2 (it cannot know
 *       whether others still sleep), so no wake-up is lost.
 *
 * Model: Tests/Models/mutex.pml checks M1 and M2 over every interleaving of three threads
 * taking the lock twice each, spin included (scripts/model-check.sh).
 */
#include "internal.h"

static inline _Atomic uint32_t *mutex_word(spindle_mutex *m) {
    return (_Atomic uint32_t *)(void *)&m->spindle_word;
}

_Static_assert(sizeof(_Atomic uint32_t) == sizeof(uint32_t), "atomic u32 size");

void spindle_mutex_init(spindle_mutex *m) {
    atomic_init(mutex_word(m), 0);
}

/* Spin iterations before sleeping: ~100 pauses is a few hundred nanoseconds to a couple
 * of microseconds depending on the CPU — longer than the queue's critical sections,
 * much shorter than a futex round trip. */
enum { MUTEX_SPINS = 100 };

void spindle_mutex_lock(spindle_mutex *m) {
    _Atomic uint32_t *w = mutex_word(m);
    uint32_t expected = 0;
    /* Acquire pairs with the release exchange in spindle_mutex_unlock: the critical
     * section we enter sees everything the previous holder wrote. */
    if (atomic_compare_exchange_strong_explicit(w, &expected, 1, memory_order_acquire,
                                                memory_order_relaxed))
        return;
    for (int i = 0; i < MUTEX_SPINS; i++) {
        /* Relaxed: only a hint of when to try the acquiring CAS. */
        uint32_t s = atomic_load_explicit(w, memory_order_relaxed);
        if (s == 0) {
            expected = 0;
            /* Acquire: as above. */
            if (atomic_compare_exchange_weak_explicit(w, &expected, 1, memory_order_acquire,
                                                      memory_order_relaxed))
                return;
        } else if (s == 2) {
            break; /* others already sleep: queue up behind them rather than barge */
        }
        spindle_cpu_relax();
    }
    /* Acquire: as above. Marking the word 2 before sleeping is what makes the holder's
     * unlock wake us (M2). */
    while (atomic_exchange_explicit(w, 2, memory_order_acquire) != 0)
        spindle_futex_wait(w, 2);
}

bool spindle_mutex_trylock(spindle_mutex *m) {
    uint32_t expected = 0;
    /* Acquire: as in spindle_mutex_lock. */
    return atomic_compare_exchange_strong_explicit(mutex_word(m), &expected, 1,
                                                   memory_order_acquire, memory_order_relaxed);
}

void spindle_mutex_unlock(spindle_mutex *m) {
    _Atomic uint32_t *w = mutex_word(m);
    /* Release pairs with the acquiring CAS/exchange of the next holder. */
    if (atomic_exchange_explicit(w, 0, memory_order_release) == 2) spindle_futex_wake(w, 1);
}
