/*
 * cgroup.c — the CPU limit of the process's container, and the worker count it implies.
 *
 * The problem. A container's CPU limit is a CFS quota: so many microseconds of CPU per
 * period, for all the group's threads together. A pool sized by the CPUs it may run on
 * (64 on a 64-core node) burns a limit of 2 in a fraction of each period and is
 * throttled for the rest: every task, a light one too, then waits for the next period.
 * Go (1.25), Java, .NET, Rust's available_parallelism, libuv and swift-nio's
 * System.coreCount read the quota; libdispatch does not.
 *
 * Where the limit is. /proc/self/cgroup names the process's group in each hierarchy
 * ("0::/path" for cgroup v2, "N:cpu,cpuacct:/path" for v1's cpu controller);
 * /proc/self/mountinfo says where each hierarchy is mounted and which part of it (its
 * `root`: a container sees its own group as the mount's root). The group's directory is
 * the mount point joined with the group's path below that root. Its limit is cpu.max
 * ("max 100000", "150000 100000": quota and period in µs) on v2, cpu.cfs_quota_us and
 * cpu.cfs_period_us (−1 for none) on v1.
 *
 * CG1. Every ancestor up to the mount point is read, and the tightest limit wins: a
 *      group inherits its parent's limit without showing it in its own file (Go misses
 *      a tighter limit on a parent, golang/go#81180).
 * CG2. On a hybrid system (v1 controllers, v2 mounted beside them without any) the
 *      cpu controller is v1's: v1 is used when /proc/self/cgroup and mountinfo both
 *      name a v1 cpu hierarchy, v2 otherwise.
 * CG3. Workers = ceil(quota / period), at least 1, and never more than the CPUs the
 *      process may run on. Rounding up lets the workers use the whole quota (1.5 CPUs
 *      with 2 workers); rounding down would leave part of it unused for ever (1 worker
 *      can use 1 CPU). Go, Java and swift-nio round up too.
 * CG4. Bad input never crashes and never guesses: a file that cannot be parsed (a
 *      number out of range, a period of 0, trailing garbage, a line too long) makes the
 *      whole limit unknown, with the reason, and the pools fall back to the CPU count.
 *      A hierarchy without the cpu controller, or a group without a limit, is no limit,
 *      and no error.
 * CG5. SPINDLE_WORKERS=N, for operators, replaces the limit's count for every pool that
 *      does not set its own; an explicit count in a pool's configuration wins over both.
 * CG6. The limit can change while the process runs (a resized container). The monitor
 *      (spare.c) re-reads it at most once a second while any pool is busy and as the
 *      pools go idle, never as work arrives, and the process-wide pools follow it
 *      (pool.c, spindle_pool_set_active_workers).
 *
 * All paths are under a configurable root (SPINDLE_CGROUP_ROOT, default none), so that
 * tests read fixture trees as the topology readers do.
 */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CG_FILE_MAX 65536 /* mountinfo of a busy host fits; more is refused (CG4) */

/* Reads ROOT/path into a NUL-terminated heap buffer; NULL when missing or too large. */
static char *read_rooted(const char *root, const char *path, size_t *len_out) {
    char full[PATH_MAX];
    if (snprintf(full, sizeof full, "%s%s", root, path) >= (int)sizeof full) return NULL;
    int fd = open(full, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return NULL;
    char *buf = malloc(CG_FILE_MAX + 1);
    size_t len = 0;
    while (buf && len < CG_FILE_MAX) {
        ssize_t n = read(fd, buf + len, CG_FILE_MAX - len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        len += (size_t)n;
    }
    close(fd);
    if (!buf) return NULL;
    if (len >= CG_FILE_MAX) { /* too large to be what it claims */
        free(buf);
        return NULL;
    }
    buf[len] = 0;
    if (len_out) *len_out = len;
    return buf;
}

/* A non-negative decimal that fills [s, end) exactly, at most 2^53; -1 otherwise. */
static int64_t parse_count(const char *s, const char *end) {
    if (s == end || end - s > 16) return -1;
    int64_t v = 0;
    for (const char *p = s; p < end; p++) {
        if (*p < '0' || *p > '9') return -1;
        v = v * 10 + (*p - '0');
    }
    return v;
}

/* Splits off the next field of `line` at `sep` (or the end); NULL when none is left. */
static char *next_field(char **line, char sep) {
    if (!*line) return NULL;
    char *f = *line;
    char *s = strchr(f, sep);
    if (s) {
        *s = 0;
        *line = s + 1;
    } else {
        *line = NULL;
    }
    return f;
}

/* mountinfo escapes space, tab, newline and backslash as \ooo. In place. */
static void unescape_octal(char *s) {
    char *o = s;
    for (char *p = s; *p;) {
        if (p[0] == '\\' && p[1] >= '0' && p[1] <= '3' && p[2] >= '0' && p[2] <= '7' && p[3] >= '0' && p[3] <= '7') {
            *o++ = (char)((p[1] - '0') * 64 + (p[2] - '0') * 8 + (p[3] - '0'));
            p += 4;
        } else {
            *o++ = *p++;
        }
    }
    *o = 0;
}

/* Whether the comma-separated `list` holds `word`. */
static bool list_has(const char *list, const char *word) {
    size_t n = strlen(word);
    for (const char *p = list; p && *p;) {
        const char *c = strchr(p, ',');
        size_t len = c ? (size_t)(c - p) : strlen(p);
        if (len == n && memcmp(p, word, n) == 0) return true;
        p = c ? c + 1 : NULL;
    }
    return false;
}

typedef struct cg_mount {
    char root[PATH_MAX];
    char point[PATH_MAX];
    bool found;
} cg_mount;

/* Finds the cgroup2 mount and the v1 mount that carries the cpu controller. */
static void find_mounts(char *mountinfo, cg_mount *v2, cg_mount *v1) {
    char *rest = mountinfo;
    char *line;
    while ((line = next_field(&rest, '\n'))) {
        /* "id parent maj:min root point opts [optional...] - fstype source superopts" */
        char *dash = strstr(line, " - ");
        if (!dash) continue;
        *dash = 0;
        char *tail = dash + 3;
        char *fstype = next_field(&tail, ' ');
        (void)next_field(&tail, ' '); /* source */
        char *super = tail ? next_field(&tail, ' ') : NULL;
        char *head = line;
        char *f[5];
        int k = 0;
        for (; k < 5 && (f[k] = next_field(&head, ' ')); k++) {
        }
        if (k < 5 || !fstype) continue;
        cg_mount *m = NULL;
        if (strcmp(fstype, "cgroup2") == 0 && !v2->found) m = v2;
        else if (strcmp(fstype, "cgroup") == 0 && super && list_has(super, "cpu") && !v1->found) m = v1;
        if (!m) continue;
        if (strlen(f[3]) >= sizeof m->root || strlen(f[4]) >= sizeof m->point) continue;
        strcpy(m->root, f[3]);
        strcpy(m->point, f[4]);
        unescape_octal(m->root);
        unescape_octal(m->point);
        m->found = true;
    }
}

/* The group's path in the v2 hierarchy and in v1's cpu hierarchy. */
static void find_groups(char *cgroup, char *v2, size_t v2_size, char *v1, size_t v1_size) {
    char *rest = cgroup;
    char *line;
    v2[0] = v1[0] = 0;
    while ((line = next_field(&rest, '\n'))) {
        char *id = next_field(&line, ':');
        char *controllers = next_field(&line, ':');
        /* The path is the rest of the line: it may itself contain ':'. */
        char *path = line;
        if (!id || !controllers || !path || path[0] != '/') continue;
        if (strcmp(id, "0") == 0 && controllers[0] == 0) {
            if (strlen(path) < v2_size) strcpy(v2, path);
        } else if (list_has(controllers, "cpu")) {
            if (strlen(path) < v1_size) strcpy(v1, path);
        }
    }
}

/* Reads one level's limit. Returns 1 and sets *cpus when it has one, 0 when it has
 * none (or no such files), -1 with `reason` when a file is malformed (CG4). */
static int read_level(const char *root, const char *dir, int version, double *cpus, char *reason, size_t reason_size) {
    char path[PATH_MAX];
    int64_t quota, period;
    if (version == 2) {
        if (snprintf(path, sizeof path, "%s/cpu.max", dir) >= (int)sizeof path) return 0;
        char *s = read_rooted(root, path, NULL);
        if (!s) return 0;
        char *nl = strchr(s, '\n');
        if (nl && nl[1] == 0) *nl = 0;
        char *sp = strchr(s, ' ');
        int rc = -1;
        if (sp) {
            period = parse_count(sp + 1, sp + 1 + strlen(sp + 1));
            if (period > 0 && period <= 1000000 && strncmp(s, "max", (size_t)(sp - s)) == 0 && sp - s == 3) {
                rc = 0;
            } else if (period > 0 && period <= 1000000 && (quota = parse_count(s, sp)) > 0) {
                *cpus = (double)quota / (double)period;
                rc = 1;
            }
        }
        if (rc < 0) snprintf(reason, reason_size, "%.160s/cpu.max is not \"max PERIOD\" or \"QUOTA PERIOD\"", dir);
        free(s);
        return rc;
    }
    if (snprintf(path, sizeof path, "%s/cpu.cfs_quota_us", dir) >= (int)sizeof path) return 0;
    char *q = read_rooted(root, path, NULL);
    if (!q) return 0;
    char *p = snprintf(path, sizeof path, "%s/cpu.cfs_period_us", dir) < (int)sizeof path ? read_rooted(root, path, NULL)
                                                                                          : NULL;
    int rc = -1;
    if (p) {
        size_t ql = strcspn(q, "\n"), pl = strcspn(p, "\n");
        bool clean = (q[ql] == 0 || q[ql + 1] == 0) && (p[pl] == 0 || p[pl + 1] == 0);
        period = parse_count(p, p + pl);
        if (clean && period > 0 && period <= 1000000) {
            if (ql == 2 && memcmp(q, "-1", 2) == 0) {
                rc = 0;
            } else if ((quota = parse_count(q, q + ql)) > 0) {
                *cpus = (double)quota / (double)period;
                rc = 1;
            }
        }
    }
    if (rc < 0) snprintf(reason, reason_size, "%.160s/cpu.cfs_quota_us or cpu.cfs_period_us is malformed", dir);
    free(q);
    free(p);
    return rc;
}

/* The directory of `group` under mount `m` (relative to the hierarchy's mounted root). */
static bool group_dir(const cg_mount *m, const char *group, char *out, size_t size) {
    const char *rel = group;
    size_t rl = strlen(m->root);
    if (strcmp(m->root, "/") == 0) {
        rel = group;
    } else if (strncmp(group, m->root, rl) == 0 && (group[rl] == '/' || group[rl] == 0)) {
        rel = group + rl;
    } else {
        /* A group outside the mounted part (a namespace shows the container's own group
         * as "/"): the mount point is the closest directory we can name. */
        rel = "";
    }
    if (strcmp(rel, "/") == 0) rel = "";
    return snprintf(out, size, "%s%s", m->point, rel) < (int)size;
}

int spindle_cgroup_cpu_limit(const char *root, spindle_cpu_limit *out) {
    memset(out, 0, sizeof *out);
    if (!root) root = getenv("SPINDLE_CGROUP_ROOT");
    if (!root) root = "";
    char *cgroup = read_rooted(root, "/proc/self/cgroup", NULL);
    char *mountinfo = cgroup ? read_rooted(root, "/proc/self/mountinfo", NULL) : NULL;
    if (!cgroup || !mountinfo) {
        free(cgroup);
        free(mountinfo);
        return 0; /* not in a cgroup we can see: no limit */
    }
    cg_mount *v2 = calloc(1, sizeof *v2), *v1 = calloc(1, sizeof *v1);
    if (!v2 || !v1) {
        free(v2), free(v1), free(cgroup), free(mountinfo);
        return ENOMEM;
    }
    char *g2 = malloc(PATH_MAX), *g1 = malloc(PATH_MAX);
    if (!g2 || !g1) {
        free(g2), free(g1), free(v2), free(v1), free(cgroup), free(mountinfo);
        return ENOMEM;
    }
    find_groups(cgroup, g2, PATH_MAX, g1, PATH_MAX);
    find_mounts(mountinfo, v2, v1);
    int version = 0;
    const cg_mount *m = NULL;
    const char *group = NULL;
    if (v1->found && g1[0]) { /* CG2 */
        version = 1, m = v1, group = g1;
    } else if (v2->found && g2[0]) {
        version = 2, m = v2, group = g2;
    }
    char dir[PATH_MAX];
    if (m && group_dir(m, group, dir, sizeof dir)) {
        out->version = version;
        /* CG1: this level and every ancestor up to the mount point. */
        size_t floor_len = strlen(m->point);
        for (;;) {
            double cpus = 0;
            int rc = read_level(root, dir, version, &cpus, out->reason, sizeof out->reason);
            if (rc < 0) {
                out->cpus = 0;
                out->workers = 0;
                break;
            }
            if (rc == 1 && (out->cpus == 0 || cpus < out->cpus)) {
                out->cpus = cpus;
                snprintf(out->dir, sizeof out->dir, "%.511s", dir);
            }
            size_t len = strlen(dir);
            if (len <= floor_len) break;
            char *slash = strrchr(dir, '/');
            if (!slash || (size_t)(slash - dir) < floor_len) break;
            *slash = 0;
            if (strlen(dir) < floor_len) break;
        }
        if (out->cpus > 0) {
            double w = ceil(out->cpus); /* CG3 */
            out->workers = w < 1 ? 1 : w > SPINDLE_MAX_WORKERS ? SPINDLE_MAX_WORKERS : (uint32_t)w;
        }
    }
    free(g2), free(g1), free(v2), free(v1), free(cgroup), free(mountinfo);
    return 0;
}

int spindle_cgroup_throttling(const spindle_cpu_limit *limit, uint64_t *nr_throttled, uint64_t *throttled_ns) {
    *nr_throttled = *throttled_ns = 0;
    if (!limit->dir[0]) return ENOENT;
    const char *root = getenv("SPINDLE_CGROUP_ROOT");
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/cpu.stat", limit->dir) >= (int)sizeof path) return ENAMETOOLONG;
    char *s = read_rooted(root ? root : "", path, NULL);
    if (!s) return ENOENT;
    char *rest = s, *line;
    while ((line = next_field(&rest, '\n'))) {
        char *value = strchr(line, ' ');
        if (!value) continue;
        *value++ = 0;
        int64_t v = parse_count(value, value + strlen(value));
        if (v < 0) continue;
        if (strcmp(line, "nr_throttled") == 0) *nr_throttled = (uint64_t)v;
        else if (strcmp(line, "throttled_usec") == 0) *throttled_ns = (uint64_t)v * 1000; /* v2 */
        else if (strcmp(line, "throttled_time") == 0) *throttled_ns = (uint64_t)v;        /* v1 */
    }
    free(s);
    return 0;
}

/* ---- The process's limit (CG5, CG6) ---- */

static pthread_mutex_t limit_lock = PTHREAD_MUTEX_INITIALIZER;
static spindle_cpu_limit limit_now;
static bool limit_read;
static uint64_t limit_read_at;
static uint32_t env_workers; /* CG5; 0: not set */
static bool env_read;

/* SPINDLE_WORKERS, read once; a value that is not a count from 1 to 4096 is said once
 * and ignored. Under limit_lock. */
static void read_env_locked(void) {
    if (env_read) return;
    env_read = true;
    const char *s = getenv("SPINDLE_WORKERS");
    if (!s || !*s) return;
    int64_t v = parse_count(s, s + strlen(s));
    if (v >= 1 && v <= SPINDLE_MAX_WORKERS) {
        env_workers = (uint32_t)v;
    } else {
        spindle_log(SPINDLE_LOG_WARNING, "SPINDLE_WORKERS=%s is not a worker count from 1 to %d; ignored", s,
                    SPINDLE_MAX_WORKERS);
    }
}

/* Reads the limit again; says once why it could not, when it could not. Under the lock. */
static void refresh_locked(void) {
    static char said[sizeof limit_now.reason];
    spindle_cpu_limit fresh;
    spindle_cgroup_cpu_limit(NULL, &fresh);
    if (fresh.reason[0] && strcmp(fresh.reason, said) != 0) {
        snprintf(said, sizeof said, "%s", fresh.reason);
        spindle_log(SPINDLE_LOG_WARNING, "%s; sizing the pools by their CPUs", fresh.reason);
    }
    limit_now = fresh;
    limit_read = true;
    limit_read_at = spindle_now_ns();
}

void spindle_cpu_limit_current(spindle_cpu_limit *out) {
    pthread_mutex_lock(&limit_lock);
    read_env_locked();
    if (!limit_read) refresh_locked();
    *out = limit_now;
    pthread_mutex_unlock(&limit_lock);
}

uint32_t spindle_cpu_limit_workers(void) {
    pthread_mutex_lock(&limit_lock);
    read_env_locked();
    if (!limit_read) refresh_locked();
    uint32_t w = env_workers ? env_workers : limit_now.workers;
    pthread_mutex_unlock(&limit_lock);
    /* CG3: never more than the CPUs the process may run on (an operator's count, CG5,
     * is taken as given). */
    uint32_t cpus = spindle_usable_cpu_count();
    return !env_workers && w > cpus ? cpus : w;
}

bool spindle_cpu_limit_from_env(void) {
    pthread_mutex_lock(&limit_lock);
    read_env_locked();
    bool set = env_workers != 0;
    pthread_mutex_unlock(&limit_lock);
    return set;
}

bool spindle_cpu_limit_refresh(uint64_t min_interval_ns) {
    pthread_mutex_lock(&limit_lock);
    read_env_locked();
    bool changed = false;
    if (!env_workers && (!limit_read || spindle_now_ns() - limit_read_at >= min_interval_ns)) {
        uint32_t before = limit_now.workers;
        refresh_locked();
        changed = limit_now.workers != before;
    }
    pthread_mutex_unlock(&limit_lock);
    return changed;
}
