/*
 * spindle_sync.h — the engine's synchronisation primitives that the Swift façade uses:
 * a futex mutex, a one-shot latch that knows about pool workers, and ThreadSanitizer
 * annotations; and the façade's per-thread words, which Swift cannot declare. Not part
 * of the pool's API (spindle.h); the façade's queues are built on them.
 */
#ifndef SPINDLE_SYNC_H
#define SPINDLE_SYNC_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** The thread-local words of the hot paths (here, and the engine's own) use the
 *  initial-exec model. Built as position-independent code, as packages are, a
 *  thread-local variable defaults to the general-dynamic model, whose every access is
 *  a call to `__tls_get_addr`: the linker turns the call into a load when it links the
 *  program, but the registers the compiler saved around it stay, in every function
 *  that reads one (a fork, a submit, an operation's add). Initial-exec is one load from
 *  the thread's block. A library loaded with `dlopen` after the program starts takes
 *  these few bytes from the reserve of static thread-local storage that glibc keeps
 *  for such libraries. */
#if defined(__GNUC__) || defined(__clang__)
#define SPINDLE_TLS_INITIAL_EXEC __attribute__((tls_model("initial-exec")))
#else
#define SPINDLE_TLS_INITIAL_EXEC
#endif

/*
 * Mutex
 * -----
 * A small futex mutex (spin briefly, then sleep) for the Swift façade's queues; see
 * mutex.c for why it is not Synchronization.Mutex. Zero-initialised memory is an
 * unlocked mutex. Not recursive; unlock only from the thread that locked.
 */
typedef struct spindle_mutex {
    uint32_t spindle_word; /* engine-owned */
} spindle_mutex;

void spindle_mutex_init(spindle_mutex *mutex);
void spindle_mutex_lock(spindle_mutex *mutex);
bool spindle_mutex_trylock(spindle_mutex *mutex);
void spindle_mutex_unlock(spindle_mutex *mutex);

/*
 * Latches
 * -------
 * A one-shot event for one waiter, who owns the latch (typically on its stack) and
 * registers it wherever the setter will find it. Initialise it on the thread that will
 * wait: that records whether the waiter is a pool worker. A worker waiting on a latch
 * keeps executing its pool's work instead of blocking (so waits inside pool work cannot
 * starve the pool); any other thread spins briefly, then sleeps on a futex — a worker of
 * another pool inside spindle_blocking_begin/end, so that its own pool is compensated.
 * The setter may touch the latch only up to the `spindle_latch_set` call: the waiter
 * may return, and the latch disappear, as soon as it is set.
 */
typedef struct spindle_latch {
    uint32_t spindle_state;  /* engine-owned */
    uint32_t spindle_pad;
    void *spindle_waiter;    /* engine-owned */
} spindle_latch;

void spindle_latch_init(spindle_latch *latch);
void spindle_latch_set(spindle_latch *latch);
void spindle_latch_wait(spindle_latch *latch);
/** Waits without running other work on the waiting thread, which blocks; on a pool
 *  worker, inside spindle_blocking_begin/end (a spare keeps the pool's CPUs busy). For
 *  waits whose contract is to block the thread (an operation's waitUntilFinished): a
 *  nested task would run inside the waiter's critical sections and thread-local state. */
void spindle_latch_wait_blocking(spindle_latch *latch);

/*
 * Asymmetric barrier
 * ------------------
 * A store-load barrier between a frequent side and a rare one (promote.c, PR4), for a
 * Dekker pair in which one side runs on every operation and the other almost never.
 * The frequent side calls spindle_barrier_light() between its store and its load; the
 * rare side calls spindle_barrier_heavy() between its own. Where the kernel offers
 * membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED), the light barrier only keeps the
 * compiler from moving the two accesses, and the heavy one makes every running thread
 * of the process execute a full barrier; elsewhere both are full fences.
 */
/** Engine-owned: whether the light barrier must be a full fence. */
extern bool spindle_barrier_light_fences;
static inline __attribute__((always_inline)) void spindle_barrier_light(void) {
    /* Relaxed: written once, before the first pool exists (promote.c). */
    if (__builtin_expect(__atomic_load_n(&spindle_barrier_light_fences, __ATOMIC_RELAXED), 0))
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
    else
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
}
void spindle_barrier_heavy(void);

/** Whether the process runs under ThreadSanitizer: set once, before main (tsan.c), and
 *  only read after. */
extern bool spindle_tsan_active;
static inline bool spindle_tsan_is_active(void) { return spindle_tsan_active; }
void spindle_tsan_acquire_slow(void *addr);
void spindle_tsan_release_slow(void *addr);

/** ThreadSanitizer annotations for locks TSan cannot see (Swift's Synchronization.Mutex
 *  is implemented in a library built without TSan): `acquire` after taking such a lock,
 *  `release` before dropping it, with the same address. Inline, so that without TSan
 *  each costs one load and one branch where every lock is taken. */
static inline void spindle_tsan_acquire(void *addr) {
    if (__builtin_expect(spindle_tsan_active, 0)) spindle_tsan_acquire_slow(addr);
}
static inline void spindle_tsan_release(void *addr) {
    if (__builtin_expect(spindle_tsan_active, 0)) spindle_tsan_release_slow(addr);
}

/** Brackets code whose memory accesses TSan must not record on the calling thread, for
 *  an access whose synchronisation happens where TSan cannot see it: an unsafe
 *  continuation's inlined `resume` writes the result into the awaiting task's frame,
 *  and the concurrency runtime (built without TSan) orders that write before the task
 *  resumes. Synchronisation inside the bracket is still seen. No-ops unless the
 *  process runs under TSan. */
void spindle_tsan_ignore_accesses_begin(void);
void spindle_tsan_ignore_accesses_end(void);

/** The calling thread's count of sampling points passed (spindle_sample_due). */
extern _Thread_local uint32_t spindle_tls_sample_count SPINDLE_TLS_INITIAL_EXEC;

/** True at one call in `period` (a power of two) on the calling thread: for sampling a
 *  hot path — the façade times one submission in 256 while a pool's metrics are
 *  published — with a count of the thread's own rather than a shared write. */
static inline bool spindle_sample_due(uint32_t period) {
    return (spindle_tls_sample_count++ & (period - 1)) == 0;
}

/** The façade's per-thread state (a retained Swift object), or NULL before the thread
 *  first needs it. The façade reads it several times per operation; a thread-local
 *  slot is one load where a pthread key's lookup is a call and a bounds check. The
 *  façade keeps a pthread key as well, only for its destructor, which frees the state
 *  when the thread exits. */
extern _Thread_local void *spindle_tls_facade_state SPINDLE_TLS_INITIAL_EXEC;

static inline __attribute__((always_inline)) void *spindle_facade_state(void) {
    return spindle_tls_facade_state;
}

static inline void spindle_set_facade_state(void *state) { spindle_tls_facade_state = state; }

#ifdef __cplusplus
}
#endif

#endif /* SPINDLE_SYNC_H */
