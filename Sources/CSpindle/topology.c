/*
 * topology.c — discovering CPUs and NUMA nodes, and planning where workers go.
 *
 * Sources, all under a configurable sysfs root (SPINDLE_SYSFS_ROOT, default /sys):
 *   devices/system/cpu/online
 *   devices/system/cpu/cpuN/topology/{physical_package_id,core_id,thread_siblings_list}
 *   devices/system/cpu/cpuN/cache/index3/shared_cpu_list
 *   devices/system/node/online, node/nodeN/{cpulist,distance,meminfo}
 * intersected with the creator's affinity mask (sched_getaffinity; see "Whose CPUs"
 * below), so `taskset` and cgroup cpusets shrink the pool. libnuma (loaded at run time,
 * numa.c) is consulted only for the real /sys: without it, or when it reports NUMA
 * unavailable (containers, seccomp), the machine is one node, as with a partial tree.
 * Either fallback is reported once per process on stderr and always through
 * spindle_topology_fallback().
 *
 * Invariants
 *   T1  Every usable CPU belongs to exactly one node of the topology.
 *   T2  Nodes are listed by ascending id and hold their usable CPUs ascending; nodes
 *       without usable CPUs are not listed (they get no workers).
 *   T3  distance[i][j] is the sysfs distance between listed nodes i and j (10 when the
 *       tree does not say).
 *
 * Placement (spindle_plan_create) and its invariants
 *   P1  Workers are spread over nodes in proportion to usable CPUs (largest remainder).
 *   P2  Within a node, workers take CPUs ordered by (SMT rank, id): one thread per core
 *       before any second hardware thread.
 *   P3  A worker's steal order is the other workers, nearest first, in tiers: same SMT
 *       core, same L3, same node, then each other node by increasing distance. Within
 *       a tier the plan lists workers by index; the scheduler starts at a random member
 *       (worker.c). With node pinning a worker has no fixed CPU, so only node tiers
 *       exist.
 *
 * Whose CPUs. Like Go's runtime, tokio and Rust's available_parallelism, a pool is
 * sized and placed by the affinity of the thread that creates it, so that a program
 * run under `taskset`, or a thread it restricted on purpose, gets a pool on those CPUs.
 * Except when that thread is one of Spindle's workers: those are pinned by Spindle
 * itself (a userInteractive worker to one CPU, a node-pinned one to its node), and
 * pools are created lazily from inside work — the default class's pool by the first
 * default-QoS operation an interactive one adds. Planned from the worker's own mask,
 * that pool had one worker (testAPoolCreatedInsideAPinnedWorkerSpansTheProcesssCPUs).
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
#include "spindle_topology.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct node_info {
    int32_t id;
    int32_t *cpus;
    uint32_t ncpus;
    bool has_memory;
} node_info;

struct spindle_topology {
    spindle_cpu_info *cpus; /* usable CPUs, ascending id */
    uint32_t ncpus;
    node_info *nodes;
    uint32_t nnodes;
    int32_t *distance; /* nnodes x nnodes */
    char *fallback;
};

typedef struct plan_worker {
    int32_t cpu;      /* pinned CPU or -1 */
    int32_t home_cpu; /* CPU used for tiering, -1 with node pinning */
    int32_t node;     /* node id */
    uint32_t node_index;
    uint32_t *steal;
    uint32_t nsteal;
    uint32_t *tier_start; /* ntiers + 1 entries */
    uint32_t ntiers;
    int32_t *pin;         /* CPUs the thread may run on (empty: unpinned) */
    uint32_t npin;
    int32_t mem_node;     /* node its memory comes from (nearest with memory) */
} plan_worker;

struct spindle_plan {
    plan_worker *workers;
    uint32_t nworkers;
    spindle_pinning pinning;
};

/* ---- small helpers ----------------------------------------------------------------- */

/* A file of the tree, whole, or NULL when it is missing or not a regular file: opened
 * without blocking, so that a FIFO (or a device) placed in a copied tree cannot stall
 * the load; sysfs attributes are regular files. */
static char *read_text(const char *root, const char *path) {
    char full[4096];
    snprintf(full, sizeof full, "%s/%s", root, path);
    int fd = open(full, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return NULL;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return NULL;
    }
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    if (!buf) {
        close(fd);
        return NULL;
    }
    for (;;) {
        ssize_t n = read(fd, buf + len, cap - len - 1);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        len += (size_t)n;
        if (len + 1 >= cap) {
            char *bigger = realloc(buf, cap * 2);
            if (!bigger) break;
            buf = bigger;
            cap *= 2;
        }
    }
    close(fd);
    buf[len] = 0;
    return buf;
}

/* Why the last spindle_topology_load on this thread failed, for its caller to report
 * (spindle_topology_load_error). */
static _Thread_local char load_error[256];

const char *spindle_topology_load_error(void) { return load_error[0] ? load_error : NULL; }

static int read_int(const char *root, const char *path, int32_t *out) {
    char *t = read_text(root, path);
    if (!t) return -1;
    char *end;
    long v = strtol(t, &end, 10);
    int ok = end != t;
    free(t);
    if (!ok) return -1;
    *out = (int32_t)v;
    return 0;
}

/* Parses "0-3,8,10-11" into `set` (SPINDLE_MAX_CPUS bits). Returns -1 on malformed
 * input. */
static int parse_list(const char *s, uint8_t *set) {
    const char *p = s;
    while (*p) {
        while (*p == ' ' || *p == '\n' || *p == '\t' || *p == ',') p++;
        if (!*p) break;
        char *end;
        long a = strtol(p, &end, 10);
        if (end == p || a < 0 || a >= SPINDLE_MAX_CPUS) return -1;
        long b = a;
        p = end;
        if (*p == '-') {
            p++;
            b = strtol(p, &end, 10);
            if (end == p || b < a || b >= SPINDLE_MAX_CPUS) return -1;
            p = end;
        }
        for (long i = a; i <= b; i++) set[i] = 1;
        if (*p && *p != ',' && *p != '\n' && *p != ' ') return -1;
    }
    return 0;
}

/* Smallest member and the rank of `cpu` in the list at path; -1 when unreadable. */
static int list_min_rank(const char *root, const char *path, int32_t cpu, int32_t *min, int32_t *rank) {
    char *t = read_text(root, path);
    if (!t) return -1;
    uint8_t *set = calloc(SPINDLE_MAX_CPUS, 1);
    if (!set) {
        free(t);
        return -1;
    }
    int rc = parse_list(t, set);
    free(t);
    if (rc == 0) {
        *min = -1;
        *rank = 0;
        int32_t r = 0;
        for (int32_t i = 0; i < SPINDLE_MAX_CPUS; i++) {
            if (!set[i]) continue;
            if (*min < 0) *min = i;
            if (i == cpu) *rank = r;
            r++;
        }
        if (*min < 0) rc = -1;
    }
    free(set);
    return rc;
}

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

static void report_fallback_once(const char *why) {
    static atomic_flag said = ATOMIC_FLAG_INIT;
    /* Relaxed: only "exactly one message" matters, not ordering. */
    if (!atomic_flag_test_and_set_explicit(&said, memory_order_relaxed))
        fprintf(stderr, "spindle: %s; scheduling as one NUMA node\n", why);
}

/* ---- loading ----------------------------------------------------------------------- */

void spindle_topology_free(spindle_topology *t) {
    if (!t) return;
    for (uint32_t i = 0; i < t->nnodes; i++) free(t->nodes[i].cpus);
    free(t->nodes);
    free(t->cpus);
    free(t->distance);
    free(t->fallback);
    free(t);
}

static int set_single_node(spindle_topology *t, const char *why) {
    for (uint32_t i = 0; i < t->nnodes; i++) free(t->nodes[i].cpus);
    free(t->nodes);
    free(t->distance);
    t->nodes = calloc(1, sizeof(node_info));
    t->distance = malloc(sizeof(int32_t));
    if (!t->nodes || !t->distance) return ENOMEM;
    t->nnodes = 1;
    t->distance[0] = 10;
    t->nodes[0].id = 0;
    t->nodes[0].has_memory = true;
    t->nodes[0].cpus = malloc(sizeof(int32_t) * t->ncpus);
    if (!t->nodes[0].cpus) return ENOMEM;
    for (uint32_t i = 0; i < t->ncpus; i++) {
        t->nodes[0].cpus[i] = t->cpus[i].id;
        t->cpus[i].node = 0;
    }
    t->nodes[0].ncpus = t->ncpus;
    t->fallback = strdup(why);
    report_fallback_once(why);
    return t->fallback ? 0 : ENOMEM;
}

int spindle_topology_load(const char *root, const char *cpu_list, spindle_topology **out) {
    *out = NULL;
    load_error[0] = 0;
    bool real_sys = false;
    if (!root) root = getenv("SPINDLE_SYSFS_ROOT");
    if (!root || !*root) {
        root = "/sys";
        real_sys = true;
    } else if (strcmp(root, "/sys") == 0) {
        real_sys = true;
    }
    /* A tree that is not there is a mistake (a mistyped path), not a machine without
     * topology: planning this machine instead would hide it. */
    struct stat root_st;
    if (!real_sys && (stat(root, &root_st) != 0 || !S_ISDIR(root_st.st_mode))) {
        snprintf(load_error, sizeof load_error, "sysfs root %s is not a directory", root);
        return ENOENT;
    }
    uint8_t *usable = calloc(SPINDLE_MAX_CPUS, 1);
    uint8_t *tmp = calloc(SPINDLE_MAX_CPUS, 1);
    spindle_topology *t = calloc(1, sizeof *t);
    if (!usable || !tmp || !t) {
        free(usable);
        free(tmp);
        free(t);
        return ENOMEM;
    }
    int rc = 0;
    /* The mask: an explicit list, or the process affinity. */
    if (cpu_list) {
        if (parse_list(cpu_list, usable) != 0) {
            snprintf(load_error, sizeof load_error,
                     "malformed, or names a CPU at or above %d (the most Spindle handles)", SPINDLE_MAX_CPUS);
            rc = EINVAL;
        }
    } else {
        cpu_set_t *set = spindle_creator_affinity();
        if (!set) {
            rc = errno ? errno : EINVAL;
        } else {
            size_t size = CPU_ALLOC_SIZE(SPINDLE_MAX_CPUS);
            for (int i = 0; i < SPINDLE_MAX_CPUS; i++)
                if (CPU_ISSET_S(i, size, set)) usable[i] = 1;
            CPU_FREE(set);
        }
    }
    /* Intersect with the online CPUs, when the tree says which they are. An empty or
     * malformed list is the tree's fault, and said so (not blamed on the mask). */
    char *online = rc ? NULL : read_text(root, "devices/system/cpu/online");
    if (online) {
        memset(tmp, 0, SPINDLE_MAX_CPUS);
        bool any = false;
        if (parse_list(online, tmp) == 0)
            for (int i = 0; i < SPINDLE_MAX_CPUS && !any; i++) any = tmp[i];
        if (!any) {
            snprintf(load_error, sizeof load_error, "%s/devices/system/cpu/online is empty or malformed", root);
            rc = EBADMSG;
        } else {
            for (int i = 0; i < SPINDLE_MAX_CPUS; i++) usable[i] &= tmp[i];
        }
        free(online);
    }
    uint32_t n = 0;
    for (int i = 0; i < SPINDLE_MAX_CPUS; i++) n += usable[i];
    if (!rc && n == 0) {
        snprintf(load_error, sizeof load_error, "no CPU of %s is online", cpu_list ? "the list" : "the CPU mask");
        rc = EINVAL;
    }
    if (!rc && !(t->cpus = calloc(n, sizeof(spindle_cpu_info)))) rc = ENOMEM;
    if (rc) {
        free(usable);
        free(tmp);
        spindle_topology_free(t);
        return rc;
    }
    char path[256];
    for (int i = 0, k = 0; i < SPINDLE_MAX_CPUS; i++) {
        if (!usable[i]) continue;
        spindle_cpu_info *c = &t->cpus[k++];
        c->id = i;
        c->node = -1;
        c->package = c->core = c->l3_group = -1;
        c->smt_group = i;
        c->smt_rank = 0;
        snprintf(path, sizeof path, "devices/system/cpu/cpu%d/topology/physical_package_id", i);
        read_int(root, path, &c->package);
        snprintf(path, sizeof path, "devices/system/cpu/cpu%d/topology/core_id", i);
        read_int(root, path, &c->core);
        snprintf(path, sizeof path, "devices/system/cpu/cpu%d/topology/thread_siblings_list", i);
        int32_t mn, rank;
        if (list_min_rank(root, path, i, &mn, &rank) == 0) {
            c->smt_group = mn;
            c->smt_rank = rank;
        }
        snprintf(path, sizeof path, "devices/system/cpu/cpu%d/cache/index3/shared_cpu_list", i);
        if (list_min_rank(root, path, i, &mn, &rank) == 0) c->l3_group = mn;
    }
    t->ncpus = n;

    /* Nodes. */
    const char *why = NULL;
    char numa_why[192];
    if (real_sys && spindle_numa_unavailable_reason(numa_why, sizeof numa_why)) why = numa_why;
    char *nodes_online = why ? NULL : read_text(root, "devices/system/node/online");
    if (!why && !nodes_online) why = "no devices/system/node/online in sysfs";
    int32_t node_ids[1024];
    uint32_t all_nodes = 0;
    if (!why) {
        memset(tmp, 0, SPINDLE_MAX_CPUS);
        if (parse_list(nodes_online, tmp) != 0) why = "malformed devices/system/node/online";
        for (int i = 0; !why && i < SPINDLE_MAX_CPUS && all_nodes < 1024; i++)
            if (tmp[i]) node_ids[all_nodes++] = i;
    }
    free(nodes_online);
    int32_t *all_dist = NULL;
    if (!why) {
        t->nodes = calloc(all_nodes, sizeof(node_info));
        all_dist = malloc(sizeof(int32_t) * all_nodes * all_nodes);
        if (!t->nodes || !all_dist) rc = ENOMEM;
    }
    uint32_t *index_of = NULL; /* online-node index -> listed index, or UINT32_MAX */
    if (!why && !rc) {
        index_of = malloc(sizeof(uint32_t) * all_nodes);
        if (!index_of) rc = ENOMEM;
    }
    for (uint32_t a = 0; !why && !rc && a < all_nodes; a++) {
        int32_t id = node_ids[a];
        for (uint32_t b = 0; b < all_nodes; b++) all_dist[a * all_nodes + b] = a == b ? 10 : 20;
        snprintf(path, sizeof path, "devices/system/node/node%d/distance", id);
        char *d = read_text(root, path);
        if (d) {
            char *p = d;
            for (uint32_t b = 0; b < all_nodes && !why; b++) {
                char *end;
                errno = 0;
                long v = strtol(p, &end, 10);
                if (end == p) break;
                /* The kernel's distances are 10 (local) to 255 (unreachable). */
                if (errno == ERANGE || v < 1 || v > 255) why = "a node distance in sysfs is out of range (1...255)";
                else all_dist[a * all_nodes + b] = (int32_t)v;
                p = end;
            }
            free(d);
            if (why) break;
        }
        snprintf(path, sizeof path, "devices/system/node/node%d/cpulist", id);
        char *cl = read_text(root, path);
        if (!cl) {
            why = "a node has no cpulist in sysfs";
            break;
        }
        memset(tmp, 0, SPINDLE_MAX_CPUS);
        int prc = parse_list(cl, tmp);
        free(cl);
        if (prc != 0) {
            why = "malformed node cpulist in sysfs";
            break;
        }
        index_of[a] = UINT32_MAX;
        uint32_t count = 0;
        for (uint32_t k = 0; k < n; k++) count += tmp[t->cpus[k].id];
        if (count == 0) continue; /* no usable CPU here: not listed (T2) */
        node_info *ni = &t->nodes[t->nnodes];
        ni->id = id;
        ni->cpus = malloc(sizeof(int32_t) * count);
        if (!ni->cpus) {
            rc = ENOMEM;
            break;
        }
        for (uint32_t k = 0; k < n; k++) {
            if (!tmp[t->cpus[k].id]) continue;
            if (t->cpus[k].node >= 0) {
                why = "a CPU is listed in two nodes";
                break;
            }
            t->cpus[k].node = id;
            ni->cpus[ni->ncpus++] = t->cpus[k].id;
        }
        /* A node whose meminfo says 0 kB is memoryless: its workers' memory comes from
         * the nearest node that has some (pool.c). Unknown counts as having memory. */
        ni->has_memory = true;
        snprintf(path, sizeof path, "devices/system/node/node%d/meminfo", id);
        char *mi = read_text(root, path);
        if (mi) {
            char *m = strstr(mi, "MemTotal:");
            if (m && strtol(m + 9, NULL, 10) == 0) ni->has_memory = false;
            free(mi);
        }
        index_of[a] = t->nnodes++;
    }
    if (!why && !rc) {
        for (uint32_t k = 0; k < n; k++)
            if (t->cpus[k].node < 0) why = "a usable CPU belongs to no node in sysfs";
    }
    if (!why && !rc) {
        t->distance = malloc(sizeof(int32_t) * (t->nnodes ? t->nnodes : 1) * (t->nnodes ? t->nnodes : 1));
        if (!t->distance) rc = ENOMEM;
        for (uint32_t a = 0; !rc && a < all_nodes; a++) {
            if (index_of[a] == UINT32_MAX) continue;
            for (uint32_t b = 0; b < all_nodes; b++) {
                if (index_of[b] == UINT32_MAX) continue;
                t->distance[index_of[a] * t->nnodes + index_of[b]] = all_dist[a * all_nodes + b];
            }
        }
    }
    free(index_of);
    free(all_dist);
    free(usable);
    free(tmp);
    if (!rc && why) {
        for (uint32_t k = 0; k < n; k++) t->cpus[k].node = -1;
        rc = set_single_node(t, why);
    }
    if (rc) {
        spindle_topology_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

uint32_t spindle_topology_cpu_count(const spindle_topology *t) { return t->ncpus; }
spindle_cpu_info spindle_topology_cpu(const spindle_topology *t, uint32_t i) { return t->cpus[i]; }
uint32_t spindle_topology_node_count(const spindle_topology *t) { return t->nnodes; }
int32_t spindle_topology_node_id(const spindle_topology *t, uint32_t i) { return t->nodes[i].id; }
int32_t spindle_topology_distance(const spindle_topology *t, uint32_t a, uint32_t b) {
    return t->distance[a * t->nnodes + b];
}
const char *spindle_topology_fallback(const spindle_topology *t) { return t->fallback; }

uint32_t spindle_topology_node_cpus(const spindle_topology *t, uint32_t i, int32_t *out, uint32_t cap) {
    uint32_t n = t->nodes[i].ncpus;
    for (uint32_t k = 0; k < n && k < cap; k++) out[k] = t->nodes[i].cpus[k];
    return n;
}

bool spindle_topology_node_has_memory(const spindle_topology *t, uint32_t i) { return t->nodes[i].has_memory; }

/* The CPU `id`, by binary search: `t->cpus` is in ascending id order (load fills it
 * from the mask, lowest CPU first). */
static const spindle_cpu_info *cpu_info(const spindle_topology *t, int32_t id) {
    uint32_t lo = 0, hi = t->ncpus;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (t->cpus[mid].id < id) lo = mid + 1;
        else hi = mid;
    }
    return lo < t->ncpus && t->cpus[lo].id == id ? &t->cpus[lo] : NULL;
}

/* ---- planning ---------------------------------------------------------------------- */

void spindle_plan_free(spindle_plan *p) {
    if (!p) return;
    for (uint32_t i = 0; i < p->nworkers; i++) {
        free(p->workers[i].steal);
        free(p->workers[i].tier_start);
        free(p->workers[i].pin);
    }
    free(p->workers);
    free(p);
}

static int by_rank_then_id(const void *a, const void *b, void *topo) {
    const spindle_cpu_info *x = cpu_info(topo, *(const int32_t *)a);
    const spindle_cpu_info *y = cpu_info(topo, *(const int32_t *)b);
    if (x->smt_rank != y->smt_rank) return x->smt_rank - y->smt_rank;
    return x->id - y->id;
}

int spindle_plan_create(const spindle_topology *t, uint32_t workers, spindle_pinning pinning,
                        const int32_t *node_ids, uint32_t node_count, spindle_plan **out) {
    *out = NULL;
    if (pinning > SPINDLE_PIN_NONE) return EINVAL;
    /* The nodes to use. */
    uint32_t use[1024], nuse = 0, total = 0;
    for (uint32_t i = 0; i < t->nnodes && nuse < 1024; i++) {
        bool wanted = node_count == 0;
        for (uint32_t k = 0; k < node_count; k++) wanted |= node_ids[k] == t->nodes[i].id;
        if (!wanted) continue;
        use[nuse++] = i;
        total += t->nodes[i].ncpus;
    }
    if (nuse == 0 || total == 0) return EINVAL;
    uint32_t w = workers ? workers : total;
    if (w > 4096) return EINVAL;
    /* P1: largest-remainder apportionment. */
    uint32_t quota[1024], given = 0;
    uint64_t rem[1024];
    for (uint32_t j = 0; j < nuse; j++) {
        uint64_t exact = (uint64_t)w * t->nodes[use[j]].ncpus;
        quota[j] = (uint32_t)(exact / total);
        rem[j] = exact % total;
        given += quota[j];
    }
    while (given < w) {
        uint32_t best = 0;
        for (uint32_t j = 1; j < nuse; j++)
            if (rem[j] > rem[best]) best = j;
        quota[best]++;
        rem[best] = 0;
        given++;
    }
    spindle_plan *p = calloc(1, sizeof *p);
    if (!p) return ENOMEM;
    p->workers = calloc(w, sizeof(plan_worker));
    if (!p->workers) {
        free(p);
        return ENOMEM;
    }
    p->nworkers = w;
    p->pinning = pinning;
    /* P2: within a node, one thread per core first. */
    uint32_t wi = 0;
    for (uint32_t j = 0; j < nuse; j++) {
        node_info *ni = &t->nodes[use[j]];
        int32_t *order = malloc(sizeof(int32_t) * ni->ncpus);
        if (!order) {
            spindle_plan_free(p);
            return ENOMEM;
        }
        memcpy(order, ni->cpus, sizeof(int32_t) * ni->ncpus);
        qsort_r(order, ni->ncpus, sizeof(int32_t), by_rank_then_id, (void *)t);
        for (uint32_t k = 0; k < quota[j]; k++, wi++) {
            plan_worker *pw = &p->workers[wi];
            pw->node = ni->id;
            pw->node_index = use[j];
            pw->home_cpu = pinning == SPINDLE_PIN_CORE ? order[k % ni->ncpus] : -1;
            pw->cpu = pw->home_cpu;
            pw->npin = pinning == SPINDLE_PIN_CORE ? 1 : pinning == SPINDLE_PIN_NODE ? ni->ncpus : 0;
            pw->pin = malloc(sizeof(int32_t) * (pw->npin ? pw->npin : 1));
            if (!pw->pin) {
                free(order);
                spindle_plan_free(p);
                return ENOMEM;
            }
            if (pinning == SPINDLE_PIN_CORE) pw->pin[0] = pw->cpu;
            if (pinning == SPINDLE_PIN_NODE) memcpy(pw->pin, ni->cpus, sizeof(int32_t) * ni->ncpus);
            /* Memory from the node itself, or the nearest node that has memory. */
            pw->mem_node = ni->id;
            if (!ni->has_memory) {
                int32_t best = -1;
                for (uint32_t m = 0; m < t->nnodes; m++) {
                    if (!t->nodes[m].has_memory) continue;
                    if (best < 0 || spindle_topology_distance(t, use[j], m) <
                                        spindle_topology_distance(t, use[j], (uint32_t)best))
                        best = (int32_t)m;
                }
                if (best >= 0) pw->mem_node = t->nodes[best].id;
            }
        }
        free(order);
    }
    /* P3: steal tiers. Workers were placed node by node (P2), so each node's workers
     * are one range of indices: a worker's own-node tiers look only at its range, and
     * each other node is added as its range. With each worker's CPU looked up once,
     * planning is linear in the size of the steal orders it writes. */
    uint32_t first[1024], count[1024]; /* by position in `use` */
    const spindle_cpu_info **infos = malloc(sizeof *infos * (w ? w : 1));
    if (!infos) {
        spindle_plan_free(p);
        return ENOMEM;
    }
    for (uint32_t j = 0, at = 0; j < nuse; j++) {
        first[j] = at;
        count[j] = quota[j];
        at += quota[j];
    }
    uint32_t *pos_of = calloc(t->nnodes ? t->nnodes : 1, sizeof(uint32_t)); /* node index -> j */
    if (!pos_of) {
        free(infos);
        spindle_plan_free(p);
        return ENOMEM;
    }
    for (uint32_t j = 0; j < nuse; j++) pos_of[use[j]] = j;
    for (uint32_t b = 0; b < w; b++)
        infos[b] = p->workers[b].home_cpu >= 0 ? cpu_info(t, p->workers[b].home_cpu) : NULL;
    for (uint32_t a = 0; a < w; a++) {
        plan_worker *me = &p->workers[a];
        me->steal = malloc(sizeof(uint32_t) * (w ? w : 1));
        me->tier_start = malloc(sizeof(uint32_t) * (w + nuse + 4));
        if (!me->steal || !me->tier_start) {
            free(infos);
            free(pos_of);
            spindle_plan_free(p);
            return ENOMEM;
        }
        bool *placed = calloc(w, sizeof(bool));
        if (!placed) {
            free(infos);
            free(pos_of);
            spindle_plan_free(p);
            return ENOMEM;
        }
        placed[a] = true;
        const spindle_cpu_info *mine = infos[a];
        uint32_t own = pos_of[me->node_index];
        /* Tier predicates, nearest first; a tier with no members is skipped. */
        for (int tier = 0; tier < 3; tier++) {
            if (!mine && tier < 2) continue;
            uint32_t start = me->nsteal;
            for (uint32_t b = first[own]; b < first[own] + count[own]; b++) {
                if (placed[b]) continue;
                const spindle_cpu_info *theirs = infos[b];
                bool in = tier == 2 ||
                          (tier == 0 && theirs && theirs->smt_group == mine->smt_group) ||
                          (tier == 1 && theirs && mine->l3_group >= 0 && theirs->l3_group == mine->l3_group);
                if (!in) continue;
                me->steal[me->nsteal++] = b;
                placed[b] = true;
            }
            if (me->nsteal > start) me->tier_start[me->ntiers++] = start;
        }
        /* Other nodes, by distance from ours, then by node id. */
        bool *node_done = calloc(t->nnodes, sizeof(bool));
        if (!node_done) {
            free(placed);
            free(infos);
            free(pos_of);
            spindle_plan_free(p);
            return ENOMEM;
        }
        node_done[me->node_index] = true;
        for (;;) {
            int32_t best = -1;
            for (uint32_t j = 0; j < nuse; j++) {
                uint32_t ni = use[j];
                if (node_done[ni]) continue;
                if (best < 0) { best = (int32_t)ni; continue; }
                int32_t d1 = spindle_topology_distance(t, me->node_index, ni);
                int32_t d0 = spindle_topology_distance(t, me->node_index, (uint32_t)best);
                if (d1 < d0 || (d1 == d0 && t->nodes[ni].id < t->nodes[best].id)) best = (int32_t)ni;
            }
            if (best < 0) break;
            node_done[best] = true;
            uint32_t start = me->nsteal;
            uint32_t j = pos_of[best];
            for (uint32_t b = first[j]; b < first[j] + count[j]; b++) {
                if (placed[b]) continue;
                me->steal[me->nsteal++] = b;
                placed[b] = true;
            }
            if (me->nsteal > start) me->tier_start[me->ntiers++] = start;
        }
        me->tier_start[me->ntiers] = me->nsteal;
        free(node_done);
        free(placed);
    }
    free(infos);
    free(pos_of);
    *out = p;
    return 0;
}

uint32_t spindle_plan_worker_count(const spindle_plan *p) { return p->nworkers; }
int32_t spindle_plan_worker_cpu(const spindle_plan *p, uint32_t w) { return p->workers[w].cpu; }
int32_t spindle_plan_worker_node(const spindle_plan *p, uint32_t w) { return p->workers[w].node; }
uint32_t spindle_plan_steal_order(const spindle_plan *p, uint32_t w, uint32_t *out, uint32_t cap) {
    for (uint32_t k = 0; k < p->workers[w].nsteal && k < cap; k++) out[k] = p->workers[w].steal[k];
    return p->workers[w].nsteal;
}
uint32_t spindle_plan_tier_count(const spindle_plan *p, uint32_t w) { return p->workers[w].ntiers; }
uint32_t spindle_plan_tier_start(const spindle_plan *p, uint32_t w, uint32_t tier) {
    return p->workers[w].tier_start[tier];
}

int32_t spindle_plan_worker_memory_node(const spindle_plan *p, uint32_t w) { return p->workers[w].mem_node; }
uint32_t spindle_plan_worker_pin(const spindle_plan *p, uint32_t w, int32_t *out, uint32_t cap) {
    for (uint32_t k = 0; k < p->workers[w].npin && k < cap; k++) out[k] = p->workers[w].pin[k];
    return p->workers[w].npin;
}
