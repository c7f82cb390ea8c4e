/*
 * topology_discovery.c — which CPUs this process may use, and how they are arranged:
 * cores, L3 groups, NUMA nodes and the distances between them.
 *
 * Sources, all under a configurable sysfs root (SPINDLE_SYSFS_ROOT, default /sys):
 *   devices/system/cpu/online
 *   devices/system/cpu/cpuN/topology/{physical_package_id,core_id,thread_siblings_list}
 *   devices/system/cpu/cpuN/cache/index3/shared_cpu_list
 *   devices/system/node/online, node/nodeN/{cpulist,distance,meminfo}
 * intersected with a CPU mask: an explicit list, or the creator's affinity (whose CPUs
 * a pool is for is decided in affinity.c). libnuma (loaded at run time, numa.c) is
 * consulted only for the real /sys: without it, or when it reports NUMA unavailable
 * (containers, seccomp), the machine is one node, as with a partial tree. Either
 * fallback is reported once per process on stderr and always through
 * spindle_topology_fallback().
 *
 * Loading is four steps: the root (a tree that is not there is a mistake, not a
 * machine without topology), the usable CPUs (the mask intersected with the online
 * CPUs), each CPU's core and L3 group, then the nodes. A malformed node tree is not
 * an error: the machine is then scheduled as one node, and the reason is kept.
 *
 * Invariants
 *   T1  Every usable CPU belongs to exactly one node of the topology.
 *   T2  Nodes are listed by ascending id and hold their usable CPUs ascending; nodes
 *       without usable CPUs are not listed (they get no workers).
 *   T3  distance[i][j] is the sysfs distance between listed nodes i and j (10 from a
 *       node to itself and 20 to the others when the node has no distance file). A
 *       distance file that is there must be a whole row: one integer in 1...255 per
 *       online node; anything else schedules the machine as one node, with the reason.
 */
#include "topology_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- reading the tree ---------------------------------------------------------------- */

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

/* A non-negative integer file (a package or core id); -1, and *out untouched, when it
 * is missing or is not one number below 2^31: the CPU then counts as unknown there. */
static int read_int(const char *root, const char *path, int32_t *out) {
    char *t = read_text(root, path);
    if (!t) return -1;
    char *end;
    errno = 0;
    long v = strtol(t, &end, 10);
    while (*end == ' ' || *end == '\n' || *end == '\t') end++;
    int ok = end != t && *end == 0 && errno == 0 && v >= 0 && v <= INT32_MAX && t[0] >= '0' && t[0] <= '9';
    free(t);
    if (!ok) return -1;
    *out = (int32_t)v;
    return 0;
}

/* One decimal CPU number at *p, below SPINDLE_MAX_CPUS, into *out; advances *p. Digits
 * only: no sign, no blank before it (what strtol would let through). */
static bool parse_cpu(const char **p, long *out) {
    if (**p < '0' || **p > '9') return false;
    long v = 0;
    while (**p >= '0' && **p <= '9') {
        v = v * 10 + (*(*p)++ - '0');
        if (v >= SPINDLE_MAX_CPUS) return false;
    }
    *out = v;
    return true;
}

/* Parses a kernel CPU list, "0-3,8,10-11", into `set` (SPINDLE_MAX_CPUS bytes): items
 * of a number or an ascending range, separated by commas, blanks or newlines. Returns -1
 * on anything else (the set may then be partly written). */
static int parse_list(const char *s, uint8_t *set) {
    const char *p = s;
    for (;;) {
        while (*p == ' ' || *p == '\n' || *p == '\t' || *p == ',') p++;
        if (!*p) return 0;
        long a, b;
        if (!parse_cpu(&p, &a)) return -1;
        b = a;
        if (*p == '-') {
            p++;
            if (!parse_cpu(&p, &b) || b < a) return -1;
        }
        for (long i = a; i <= b; i++) set[i] = 1;
        if (*p && *p != ',' && *p != '\n' && *p != ' ' && *p != '\t') return -1;
    }
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

static void report_fallback_once(const char *why) {
    static atomic_flag said = ATOMIC_FLAG_INIT;
    /* Relaxed: only "exactly one message" matters, not ordering. */
    if (!atomic_flag_test_and_set_explicit(&said, memory_order_relaxed))
        spindle_log(SPINDLE_LOG_NOTICE, "%s; scheduling as one NUMA node", why);
}

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
    t->nnodes = 0; /* so that spindle_topology_free stays right if what follows fails */
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

/* Whether `path` exists under `root` but is not a regular file (a directory, a FIFO):
 * a tree that has the name but not the attribute is malformed, not silent. */
static bool present_but_not_a_file(const char *root, const char *path) {
    char full[4096];
    snprintf(full, sizeof full, "%s/%s", root, path);
    struct stat st;
    return stat(full, &st) == 0 && !S_ISREG(st.st_mode);
}

/* ---- loading ----------------------------------------------------------------------- */

/* The most node ids read from devices/system/node/online. */
#define MAX_NODES 1024

/* Step 1: the tree's root; `*real_sys` when it is the machine's own /sys. */
static int resolve_root(const char **root, bool *real_sys) {
    *real_sys = false;
    if (!*root) *root = getenv("SPINDLE_SYSFS_ROOT");
    if (!*root || !**root) {
        *root = "/sys";
        *real_sys = true;
    } else if (strcmp(*root, "/sys") == 0) {
        *real_sys = true;
    }
    /* A tree that is not there is a mistake (a mistyped path), not a machine without
     * topology: planning this machine instead would hide it. */
    struct stat root_st;
    if (!*real_sys && (stat(*root, &root_st) != 0 || !S_ISDIR(root_st.st_mode))) {
        snprintf(load_error, sizeof load_error, "sysfs root %s is not a directory", *root);
        return ENOENT;
    }
    return 0;
}

/* Step 2: `usable` (SPINDLE_MAX_CPUS bytes) gets the mask — an explicit list, or the
 * creator's affinity — intersected with the online CPUs when the tree says which they
 * are; `*count` how many that leaves. `tmp` is scratch of the same size. */
static int read_usable_cpus(const char *root, const char *cpu_list, uint8_t *usable, uint8_t *tmp,
                            uint32_t *count) {
    if (cpu_list) {
        if (parse_list(cpu_list, usable) != 0) {
            snprintf(load_error, sizeof load_error,
                     "malformed, or names a CPU at or above %d (the most Spindle handles)", SPINDLE_MAX_CPUS);
            return EINVAL;
        }
    } else {
        cpu_set_t *set = spindle_creator_affinity();
        if (!set) return errno ? errno : EINVAL;
        size_t size = CPU_ALLOC_SIZE(SPINDLE_MAX_CPUS);
        for (int i = 0; i < SPINDLE_MAX_CPUS; i++)
            if (CPU_ISSET_S(i, size, set)) usable[i] = 1;
        CPU_FREE(set);
    }
    /* An empty or malformed online list is the tree's fault, and said so (not blamed
     * on the mask). */
    char *online = read_text(root, "devices/system/cpu/online");
    if (!online && present_but_not_a_file(root, "devices/system/cpu/online")) {
        snprintf(load_error, sizeof load_error, "%s/devices/system/cpu/online is not a regular file", root);
        return EBADMSG;
    }
    if (online) {
        memset(tmp, 0, SPINDLE_MAX_CPUS);
        bool any = false;
        if (parse_list(online, tmp) == 0)
            for (int i = 0; i < SPINDLE_MAX_CPUS && !any; i++) any = tmp[i];
        free(online);
        if (!any) {
            snprintf(load_error, sizeof load_error, "%s/devices/system/cpu/online is empty or malformed", root);
            return EBADMSG;
        }
        for (int i = 0; i < SPINDLE_MAX_CPUS; i++) usable[i] &= tmp[i];
    }
    uint32_t n = 0;
    for (int i = 0; i < SPINDLE_MAX_CPUS; i++) n += usable[i];
    if (n == 0) {
        snprintf(load_error, sizeof load_error, "no CPU of %s is online", cpu_list ? "the list" : "the CPU mask");
        return EINVAL;
    }
    *count = n;
    return 0;
}

/* Step 3: each usable CPU's package, core, SMT siblings and L3 group, in ascending id
 * order. What the tree does not say leaves the CPU a core and an L3 group of its own. */
static int read_cpus(const char *root, const uint8_t *usable, uint32_t n, spindle_topology *t) {
    if (!(t->cpus = calloc(n, sizeof(spindle_cpu_info)))) return ENOMEM;
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
    return 0;
}

/* The node ids in devices/system/node/online, or a reason they cannot be had. */
static const char *read_node_ids(const char *root, uint8_t *tmp, int32_t *ids, uint32_t *count) {
    char *online = read_text(root, "devices/system/node/online");
    if (!online) return "no devices/system/node/online in sysfs";
    memset(tmp, 0, SPINDLE_MAX_CPUS);
    int rc = parse_list(online, tmp);
    free(online);
    if (rc != 0) return "malformed devices/system/node/online";
    *count = 0;
    for (int i = 0; i < SPINDLE_MAX_CPUS && *count < MAX_NODES; i++)
        if (tmp[i]) ids[(*count)++] = i;
    return NULL;
}

/* Node `id`'s row of distances into `row` (`count` entries), or a reason the tree's row
 * is unusable. A node without a distance file is 10 from itself and 20 from the others
 * (T3); a file must hold exactly one distance per online node, each an integer in the
 * kernel's range, 10 (local) to 255 (unreachable), separated by blanks. */
static const char *read_distances(const char *root, int32_t id, uint32_t self, uint32_t count, int32_t *row) {
    for (uint32_t b = 0; b < count; b++) row[b] = b == self ? 10 : 20;
    char path[256];
    snprintf(path, sizeof path, "devices/system/node/node%d/distance", id);
    char *d = read_text(root, path);
    if (!d) return present_but_not_a_file(root, path) ? "a node distance in sysfs is not a regular file" : NULL;
    const char *why = NULL;
    char *p = d;
    uint32_t b = 0;
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\n') p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        bool number = end != p && (*end == 0 || *end == ' ' || *end == '\t' || *end == '\n');
        if (!number) { why = "a node distance row in sysfs holds something other than integers"; break; }
        if (b == count) { why = "a node distance row in sysfs has more entries than there are online nodes"; break; }
        if (errno == ERANGE || v < 1 || v > 255) { why = "a node distance in sysfs is out of range (1...255)"; break; }
        row[b++] = (int32_t)v;
        p = end;
    }
    if (!why && b < count) why = "a node distance row in sysfs has fewer entries than there are online nodes";
    free(d);
    return why;
}

/* Node `id`'s usable CPUs and memory, appended to t->nodes when it has any usable CPU
 * (T2); `*listed` is then its index, else UINT32_MAX. Returns a reason the node tree is
 * unusable, or NULL; ENOMEM in `*rc`. */
static const char *read_node(const char *root, int32_t id, spindle_topology *t, uint8_t *tmp,
                             uint32_t *listed, int *rc) {
    *listed = UINT32_MAX;
    char path[256];
    snprintf(path, sizeof path, "devices/system/node/node%d/cpulist", id);
    char *cl = read_text(root, path);
    if (!cl) return "a node has no cpulist in sysfs";
    memset(tmp, 0, SPINDLE_MAX_CPUS);
    int prc = parse_list(cl, tmp);
    free(cl);
    if (prc != 0) return "malformed node cpulist in sysfs";
    uint32_t count = 0;
    for (uint32_t k = 0; k < t->ncpus; k++) count += tmp[t->cpus[k].id];
    if (count == 0) return NULL; /* no usable CPU here: not listed (T2) */
    node_info *ni = &t->nodes[t->nnodes];
    ni->id = id;
    if (!(ni->cpus = malloc(sizeof(int32_t) * count))) {
        *rc = ENOMEM;
        return NULL;
    }
    for (uint32_t k = 0; k < t->ncpus; k++) {
        if (!tmp[t->cpus[k].id]) continue;
        if (t->cpus[k].node >= 0) { /* not counted in t->nnodes: freed here */
            free(ni->cpus);
            ni->cpus = NULL;
            ni->ncpus = 0;
            return "a CPU is listed in two nodes";
        }
        t->cpus[k].node = id;
        ni->cpus[ni->ncpus++] = t->cpus[k].id;
    }
    /* A node whose meminfo says 0 kB is memoryless: its workers' memory comes from the
     * nearest node that has some (pool.c). Unknown counts as having memory. */
    ni->has_memory = true;
    snprintf(path, sizeof path, "devices/system/node/node%d/meminfo", id);
    char *mi = read_text(root, path);
    if (mi) {
        char *m = strstr(mi, "MemTotal:");
        if (m && strtol(m + 9, NULL, 10) == 0) ni->has_memory = false;
        free(mi);
    }
    *listed = t->nnodes++;
    return NULL;
}

/* Step 4: the nodes (T1-T3). Returns a reason the machine must be scheduled as one
 * node, or NULL; ENOMEM in `*rc`. */
static const char *read_nodes(const char *root, bool real_sys, spindle_topology *t, uint8_t *tmp, int *rc,
                              char *numa_why, size_t numa_why_size) {
    if (real_sys && spindle_numa_unavailable_reason(numa_why, numa_why_size)) return numa_why;
    int32_t ids[MAX_NODES];
    uint32_t all = 0;
    const char *why = read_node_ids(root, tmp, ids, &all);
    if (why) return why;
    int32_t *all_dist = malloc(sizeof(int32_t) * (all ? all * all : 1));
    uint32_t *index_of = malloc(sizeof(uint32_t) * (all ? all : 1)); /* online index -> listed, or UINT32_MAX */
    t->nodes = calloc(all ? all : 1, sizeof(node_info));
    if (!all_dist || !index_of || !t->nodes) *rc = ENOMEM;
    for (uint32_t a = 0; !why && !*rc && a < all; a++) {
        why = read_distances(root, ids[a], a, all, &all_dist[a * all]);
        if (!why) why = read_node(root, ids[a], t, tmp, &index_of[a], rc);
    }
    for (uint32_t k = 0; !why && !*rc && k < t->ncpus; k++)
        if (t->cpus[k].node < 0) why = "a usable CPU belongs to no node in sysfs";
    if (!why && !*rc) {
        uint32_t listed = t->nnodes ? t->nnodes : 1;
        if (!(t->distance = malloc(sizeof(int32_t) * listed * listed))) *rc = ENOMEM;
        for (uint32_t a = 0; !*rc && a < all; a++) {
            if (index_of[a] == UINT32_MAX) continue;
            for (uint32_t b = 0; b < all; b++) {
                if (index_of[b] == UINT32_MAX) continue;
                t->distance[index_of[a] * t->nnodes + index_of[b]] = all_dist[a * all + b];
            }
        }
    }
    free(index_of);
    free(all_dist);
    return why;
}

int spindle_topology_load(const char *root, const char *cpu_list, spindle_topology **out) {
    *out = NULL;
    load_error[0] = 0;
    bool real_sys;
    int rc = resolve_root(&root, &real_sys);
    if (rc) return rc;
    uint8_t *usable = calloc(SPINDLE_MAX_CPUS, 1);
    uint8_t *tmp = calloc(SPINDLE_MAX_CPUS, 1);
    spindle_topology *t = calloc(1, sizeof *t);
    uint32_t n = 0;
    if (!usable || !tmp || !t) rc = ENOMEM;
    if (!rc) rc = read_usable_cpus(root, cpu_list, usable, tmp, &n);
    if (!rc) rc = read_cpus(root, usable, n, t);
    char numa_why[192];
    const char *why = rc ? NULL : read_nodes(root, real_sys, t, tmp, &rc, numa_why, sizeof numa_why);
    free(usable);
    free(tmp);
    if (!rc && why) {
        for (uint32_t k = 0; k < t->ncpus; k++) t->cpus[k].node = -1;
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
const spindle_cpu_info *spindle_topology_find_cpu(const spindle_topology *t, int32_t id) {
    uint32_t lo = 0, hi = t->ncpus;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (t->cpus[mid].id < id) lo = mid + 1;
        else hi = mid;
    }
    return lo < t->ncpus && t->cpus[lo].id == id ? &t->cpus[lo] : NULL;
}
