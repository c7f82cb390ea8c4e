/*
 * tsan.c — ThreadSanitizer annotations for synchronisation TSan cannot observe.
 *
 * Swift's Synchronization.Mutex takes its futex lock inside libswiftSynchronization,
 * which is not built with TSan, so TSan sees the accesses a Mutex protects but not the
 * lock, and reports races that cannot happen. The Swift layer brackets each critical
 * section with these calls (see Runtime/Locking.swift). Likewise an offload's unsafe
 * continuation: its `resume` is inlined into Spindle, so TSan sees it write the result
 * into the awaiting task's frame but not the runtime's ordering of that write before
 * the task resumes (Pool/ThreadPool+Async.swift brackets the resume with the
 * ignore calls). The TSan runtime's entry points are declared weak: without TSan they
 * resolve to NULL. `spindle_tsan_active` records, before main, whether they resolved,
 * so the lock annotations, inline in spindle_sync.h, cost one load and one branch.
 */
#include "spindle_sync.h"

#include <stddef.h>

/* Weak: resolved to the TSan runtime's functions when it is linked in, NULL otherwise. */
extern void __tsan_acquire(void *addr) __attribute__((weak));
extern void __tsan_release(void *addr) __attribute__((weak));
extern void __tsan_ignore_thread_begin(void) __attribute__((weak));
extern void __tsan_ignore_thread_end(void) __attribute__((weak));

bool spindle_tsan_active = false;

/* Before main, and so before any thread but the first exists: the flag is written
 * once, and every later read happens after the threads' creation, which orders it. */
__attribute__((constructor)) static void spindle_tsan_detect(void) {
    spindle_tsan_active = __tsan_acquire != NULL && __tsan_release != NULL;
}

void spindle_tsan_acquire_slow(void *addr) {
    if (__tsan_acquire) __tsan_acquire(addr);
}

void spindle_tsan_release_slow(void *addr) {
    if (__tsan_release) __tsan_release(addr);
}

void spindle_tsan_ignore_accesses_begin(void) {
    if (__tsan_ignore_thread_begin) __tsan_ignore_thread_begin();
}

void spindle_tsan_ignore_accesses_end(void) {
    if (__tsan_ignore_thread_end) __tsan_ignore_thread_end();
}
