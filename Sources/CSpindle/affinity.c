/*
 * affinity.c — whose CPUs a new pool is planned for.
 *
 * Whose CPUs. Like Go's runtime, tokio and Rust's available_parallelism, a pool is
 * sized and placed by the affinity of the thread that creates it, so that a program
 * run under `taskset`, or a thread it restricted on purpose, gets a pool on those CPUs.
 * Except when that thread is one of Spindle's workers: those are pinned by Spindle
 * itself (a userInteractive worker to one CPU, a node-pinned one to its node), and
 * pools are created lazily from inside work — the default class's pool by the first
 * default-QoS operation an interactive one adds. Planned from the worker's own mask,
 * that pool would have one worker.
 * A worker's pool therefore remembers the mask it was planned for, and a pool created
 * by one of its workers is planned for that mask: as if the thread that created the
 * outer pool had created it.
 *
 * Process-wide pools (spindle_config.permanent: Swift's shared pool and its quality-
 * of-service classes) are created by whichever thread first needs them — often an
 * event loop that has pinned itself to one CPU, exactly the CPU their work should
 * leave. They are planned for the process's CPUs instead: the mask the main thread had
 * when the engine was loaded (spindle_process_affinity), which `taskset` and a
 * container's cpuset shape, and which no later pinning of a thread changes.
 */
#include "internal.h"

#include <errno.h>
#include <sched.h>
#include <string.h>
#include <unistd.h>

/* The CPUs the process started with: the main thread's mask when the engine is loaded
 * (a constructor runs on it, before the program can have pinned any thread), so that
 * `taskset` and a container's cpuset are honoured, but an event loop that later pins
 * itself to one CPU is not. NULL if it could not be read. */
static cpu_set_t *startup_affinity;

__attribute__((constructor)) static void capture_startup_affinity(void) {
    cpu_set_t *set = CPU_ALLOC(SPINDLE_MAX_CPUS);
    if (!set) return;
    if (sched_getaffinity(0, CPU_ALLOC_SIZE(SPINDLE_MAX_CPUS), set) != 0) {
        CPU_FREE(set);
        return;
    }
    startup_affinity = set;
}

_Thread_local bool spindle_tls_planning_for_process;

cpu_set_t *spindle_process_affinity(void) {
    size_t size = CPU_ALLOC_SIZE(SPINDLE_MAX_CPUS);
    cpu_set_t *set = CPU_ALLOC(SPINDLE_MAX_CPUS);
    if (!set) {
        errno = ENOMEM;
        return NULL;
    }
    if (startup_affinity) {
        memcpy(set, startup_affinity, size);
        return set;
    }
    /* The main thread's mask now (its tid is the pid). */
    if (sched_getaffinity(getpid(), size, set) == 0) return set;
    int err = errno;
    CPU_FREE(set);
    errno = err;
    return NULL;
}

cpu_set_t *spindle_creator_affinity(void) {
    if (spindle_tls_planning_for_process) return spindle_process_affinity();
    cpu_set_t *set = CPU_ALLOC(SPINDLE_MAX_CPUS);
    if (!set) {
        errno = ENOMEM;
        return NULL;
    }
    size_t size = CPU_ALLOC_SIZE(SPINDLE_MAX_CPUS);
    const spindle_worker *w = spindle_tls_worker;
    if (w && w->pool->affinity) {
        /* Written before the worker started, never again: no ordering needed. */
        memcpy(set, w->pool->affinity, size);
        return set;
    }
    if (sched_getaffinity(0, size, set) == 0) return set;
    int err = errno;
    CPU_FREE(set);
    errno = err;
    return NULL;
}
