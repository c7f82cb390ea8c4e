/*
 * numa.c — libnuma, loaded when the process first needs it.
 *
 * Spindle uses five functions of libnuma: numa_available and numa_max_node to learn
 * whether the kernel offers NUMA memory policy, and numa_alloc_onnode, numa_alloc and
 * numa_free for each worker's block and deque ring on a machine with more than one node. They are
 * looked up with dlopen("libnuma.so.1") on first use instead of being linked.
 *
 * Why at run time. Linked, libnuma is a build-time dependency of every package that
 * depends on Spindle: its headers (Debian's libnuma-dev) must be on the machine that
 * compiles the service, and a missing one stops the build of someone else's package
 * at "numa.h: No such file or directory". Declared as a SwiftPM system library, the
 * error would at least name the package to install, but every user would still have to
 * install it, including the great majority whose machines have one node and gain
 * nothing from it. Loaded at run time, Spindle builds with nothing but the toolchain;
 * a multi-node machine with libnuma's runtime library (libnuma1, present wherever
 * numactl is) gets node-local memory, and one without it is scheduled as one node,
 * which topology_discovery.c reports once, naming the library, like its other fallbacks.
 *
 * Rejected: calling mbind(2) directly. It would drop libnuma altogether, but libnuma
 * also knows the kernel's quirks (the node-mask width it must pass, nodes that are
 * online without memory); reimplementing that is not where Spindle should differ.
 *
 * Invariants
 *   NU1  The library is looked up once per process (pthread_once), unless a test asks
 *       for another name (spindle_test_numa_reload), and never unloaded.
 *   NU2  A pool decides once, when it is created, whether its memory comes from libnuma
 *       (spindle_numa_multinode); everything it allocates through libnuma it frees
 *       through libnuma. The function pointers, once set, are never cleared, so a test
 *       that looks up a missing name later cannot strand such memory.
 */
#include "internal.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#define SPINDLE_LIBNUMA "libnuma.so.1"

static struct {
    pthread_mutex_t lock;
    pthread_once_t once;
    /* The functions, from the last successful lookup; never cleared, so memory a pool
     * took from libnuma can always be given back to it (NU2). */
    int (*available)(void);
    int (*max_node)(void);
    void *(*alloc)(size_t);
    void *(*alloc_onnode)(size_t, int);
    void (*free)(void *, size_t);
    /* Whether the last lookup found a library that reports NUMA available, and if not,
     * why. Under `lock`. */
    bool usable;
    char why[192];
} numa = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .once = PTHREAD_ONCE_INIT,
};

/* Looks `soname` up and decides whether NUMA is usable. Caller holds `numa.lock`. */
static void load_locked(const char *soname) {
    numa.usable = false;
    void *h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(numa.why, sizeof numa.why,
                 "%s is not installed (Debian and Ubuntu: apt-get install libnuma1)", soname);
        return;
    }
    void *available = dlsym(h, "numa_available"), *max_node = dlsym(h, "numa_max_node");
    void *alloc = dlsym(h, "numa_alloc"), *alloc_onnode = dlsym(h, "numa_alloc_onnode");
    void *release = dlsym(h, "numa_free");
    if (!available || !max_node || !alloc || !alloc_onnode || !release) {
        snprintf(numa.why, sizeof numa.why, "%s lacks one of numa_available, numa_max_node, "
                 "numa_alloc, numa_alloc_onnode, numa_free", soname);
        dlclose(h);
        return;
    }
    /* The handle stays open for the life of the process. POSIX: dlsym's data pointer
     * converts to a function pointer through its representation. */
    memcpy(&numa.available, &available, sizeof available);
    memcpy(&numa.max_node, &max_node, sizeof max_node);
    memcpy(&numa.alloc, &alloc, sizeof alloc);
    memcpy(&numa.alloc_onnode, &alloc_onnode, sizeof alloc_onnode);
    memcpy(&numa.free, &release, sizeof release);
    if (numa.available() < 0) {
        snprintf(numa.why, sizeof numa.why, "libnuma reports NUMA unavailable (numa_available() < 0)");
        return;
    }
    numa.why[0] = 0;
    numa.usable = true;
}

static void load_once(void) {
    pthread_mutex_lock(&numa.lock);
    load_locked(SPINDLE_LIBNUMA);
    pthread_mutex_unlock(&numa.lock);
}

static void load(void) { pthread_once(&numa.once, load_once); }

int spindle_numa_unavailable_reason(char *buf, size_t size) {
    load();
    pthread_mutex_lock(&numa.lock);
    bool usable = numa.usable;
    if (!usable && size) snprintf(buf, size, "%s", numa.why);
    pthread_mutex_unlock(&numa.lock);
    return usable ? 0 : 1;
}

bool spindle_numa_multinode(void) {
    load();
    pthread_mutex_lock(&numa.lock);
    bool multi = numa.usable && numa.max_node() > 0;
    pthread_mutex_unlock(&numa.lock);
    return multi;
}

void *spindle_numa_alloc(size_t bytes, int32_t node) {
    load();
    pthread_mutex_lock(&numa.lock);
    void *(*alloc)(size_t) = numa.alloc;
    void *(*alloc_onnode)(size_t, int) = numa.alloc_onnode;
    pthread_mutex_unlock(&numa.lock);
    if (!alloc) return NULL;
    return node >= 0 ? alloc_onnode(bytes, (int)node) : alloc(bytes);
}

void spindle_numa_free(void *mem, size_t bytes) {
    pthread_mutex_lock(&numa.lock);
    void (*release)(void *, size_t) = numa.free;
    pthread_mutex_unlock(&numa.lock);
    /* Non-NULL: this memory came from spindle_numa_alloc, which needed the functions,
     * and they are never cleared (NU2). */
    release(mem, bytes);
}

#ifdef SPINDLE_TESTING
int spindle_test_numa_reload(const char *soname) {
    load();
    pthread_mutex_lock(&numa.lock);
    load_locked(soname ? soname : SPINDLE_LIBNUMA);
    int usable = numa.usable;
    pthread_mutex_unlock(&numa.lock);
    return usable;
}
#endif
