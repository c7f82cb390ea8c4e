/*
 * bench_support.h — C helpers for the benchmark only (not part of Spindle).
 */
#ifndef BENCH_SUPPORT_H
#define BENCH_SUPPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The bare wake-up hand-off that `qos-under-load` reports beside Spindle and Dispatch
 * (handoff.c): one parked thread per allowed CPU, pinned to it, at the given nice and
 * scheduler slice, each with a one-task mailbox; a submission goes to the thread of
 * the submitter's own CPU and wakes it with one futex call. No queue, no search, no
 * bookkeeping: what any pool that parks its idle threads pays at least. */
typedef struct bench_handoff bench_handoff;

/* NULL on failure (errno set). `nice_error` / `slice_error` receive the errno of a
 * refused nice or slice (0 when applied): the threads then keep the creator's. */
bench_handoff *bench_handoff_create(int nice, uint32_t slice_ns, int *nice_error, int *slice_error);

/* Runs fn(ctx) on the thread of the calling thread's CPU. One task at a time per
 * thread: a submission to a thread whose previous task has not started yet waits for
 * it (the benchmark submits one and waits for it to start before the next). */
void bench_handoff_submit(bench_handoff *h, void (*fn)(void *), void *ctx);

/* Stops and joins the threads. */
void bench_handoff_destroy(bench_handoff *h);

/* The bare offload that `async-offload` reports beside Spindle (offload.c): one thread
 * per allowed CPU, each with a bounded ring that the submissions fill in turn, 50 us of
 * looking again (yielding between looks) on an empty ring, then a futex sleep. No pool
 * around it: what an offload to a second set of threads pays by itself. */
typedef struct bench_offload bench_offload;

/* NULL on failure (errno set). */
bench_offload *bench_offload_create(void);

/* Runs fn(ctx, arg) on one of the threads, each submission on the next thread. */
void bench_offload_submit(bench_offload *h, void (*fn)(void *, intptr_t), void *ctx, intptr_t arg);

/* Stops and joins the threads, which must have nothing left to run. */
void bench_offload_destroy(bench_offload *h);

/* Has glibc merge the small chunks freed into its fast bins (every arena) now, outside
 * a timed region (heap.c). glibc defers that merge until a later large request or
 * large free needs it, and then merges them all at once, in whichever thread asked:
 * after Foundation's queue has freed its ~10^5 operations, 20–30 ms of work charged to
 * the next system that happens to allocate a large block. The harness calls this in
 * its pause between systems (Harness.swift, settle). */
void bench_consolidate_heap(void);

/* The bytes malloc set aside for `block` (its size class): malloc_usable_size, which the
 * Swift side cannot reach through Glibc's module. */
size_t bench_allocation_size(const void *block);

/* A one-byte flag inside memory that Swift sees only as bytes (a ManagedBuffer's
 * elements): set by the thread done with the memory, with release; read by the thread
 * that frees it, with acquire, so that the setter's accesses precede the free. */
static inline void bench_flag_set(void *flag) { __atomic_store_n((unsigned char *)flag, 1, __ATOMIC_RELEASE); }
static inline bool bench_flag_is_set(const void *flag) {
    return __atomic_load_n((const unsigned char *)flag, __ATOMIC_ACQUIRE) != 0;
}

/* Around a timed region, under callgrind (scripts/instructions.sh): counts it alone and
 * dumps its count labelled `label`. No-ops elsewhere (instructions.c). */
void bench_instructions_begin(void);
void bench_instructions_end(const char *label);

#endif
