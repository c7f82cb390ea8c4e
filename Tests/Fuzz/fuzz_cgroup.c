/*
 * fuzz_cgroup.c — libFuzzer target for the container CPU-limit reader (cgroup.c).
 *
 * An input is a fake process view (tree.h): /proc/self/cgroup, /proc/self/mountinfo,
 * and the limit files of a v2 group /a/b and of a v1 cpu,cpuacct group /a/b with their
 * ancestors, plus both cpu.stat files. The reader must never crash, hang or read out of
 * bounds (AddressSanitizer), and must keep CG3 and CG4: it returns 0 (or ENOMEM), a
 * limit it reports is a finite positive number of CPUs with ceil(cpus) workers (at
 * least 1, at most 4096), and a file it could not parse leaves a reason and no limit at
 * all, never a guess. Reading the group's throttling afterwards must not crash either.
 */
#include "spindle.h"
#include "tree.h"

#include <math.h>

static const char *const paths[] = {
    "proc/self/cgroup",
    "proc/self/mountinfo",
    "sys/fs/cgroup/cpu.max",
    "sys/fs/cgroup/a/cpu.max",
    "sys/fs/cgroup/a/b/cpu.max",
    "sys/fs/cgroup/a/b/cpu.stat",
    "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us",
    "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us",
    "sys/fs/cgroup/cpu,cpuacct/a/cpu.cfs_quota_us",
    "sys/fs/cgroup/cpu,cpuacct/a/cpu.cfs_period_us",
    "sys/fs/cgroup/cpu,cpuacct/a/b/cpu.cfs_quota_us",
    "sys/fs/cgroup/cpu,cpuacct/a/b/cpu.cfs_period_us",
    "sys/fs/cgroup/cpu,cpuacct/a/b/cpu.stat",
};

static tree fake;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    tree_init(&fake, "cgroup", paths, sizeof paths / sizeof paths[0]);
    setenv("SPINDLE_CGROUP_ROOT", fake.root, 1); /* for spindle_cgroup_throttling */
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tree_set(&fake, data, size);
    spindle_cpu_limit limit;
    int rc = spindle_cgroup_cpu_limit(fake.root, &limit);
    CHECK(rc == 0 || rc == ENOMEM);
    if (rc) return 0;
    CHECK(memchr(limit.reason, 0, sizeof limit.reason) != NULL);
    CHECK(memchr(limit.dir, 0, sizeof limit.dir) != NULL);
    CHECK(limit.version >= 0 && limit.version <= 2);
    CHECK(isfinite(limit.cpus) && limit.cpus >= 0);
    if (limit.reason[0]) CHECK(limit.cpus == 0 && limit.workers == 0); /* CG4 */
    if (limit.cpus > 0) {
        double w = ceil(limit.cpus); /* CG3 */
        CHECK(limit.workers >= 1 && limit.workers <= 4096);
        CHECK(limit.workers == (w < 1 ? 1 : w > 4096 ? 4096 : (uint32_t)w));
    } else {
        CHECK(limit.workers == 0);
    }
    uint64_t periods, ns;
    int trc = spindle_cgroup_throttling(&limit, &periods, &ns);
    CHECK(trc == 0 || trc == ENOENT || trc == ENAMETOOLONG);
    return 0;
}
