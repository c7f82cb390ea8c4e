/*
 * fuzz_topology.c — libFuzzer target for the sysfs topology readers
 * (topology_discovery.c) and the planner on what they load (topology_plan.c).
 *
 * An input is a whole fake tree (tree.h): the online lists, four nodes' cpulist,
 * distance and meminfo, and eight CPUs' package, core, SMT siblings and L3 list. It is
 * loaded for CPUs 0-15, whatever this machine has. The readers must never crash, hang
 * or read out of bounds (AddressSanitizer), and must answer in one of two ways:
 *   - an error, with a reason (spindle_topology_load_error), or
 *   - a topology that keeps T1-T3 (topology_discovery.c): every usable CPU in exactly
 *     one node, nodes ascending with their CPUs ascending, distances in 1...255 and 10
 *     on the diagonal whenever the tree gave them, and a reason whenever it fell back
 *     to one node; and a plan can be made of it.
 * A broken promise aborts, which libFuzzer reports with the input.
 */
#include "spindle_topology.h"
#include "tree.h"

#include <stdbool.h>

static const char *const paths[] = {
    "devices/system/cpu/online",
    "devices/system/node/online",
    "devices/system/node/node0/cpulist", "devices/system/node/node0/distance", "devices/system/node/node0/meminfo",
    "devices/system/node/node1/cpulist", "devices/system/node/node1/distance", "devices/system/node/node1/meminfo",
    "devices/system/node/node2/cpulist", "devices/system/node/node2/distance", "devices/system/node/node2/meminfo",
    "devices/system/node/node3/cpulist", "devices/system/node/node3/distance", "devices/system/node/node3/meminfo",
#define CPU(n)                                                                                       \
    "devices/system/cpu/cpu" #n "/topology/physical_package_id", "devices/system/cpu/cpu" #n "/topology/core_id", \
        "devices/system/cpu/cpu" #n "/topology/thread_siblings_list",                                \
        "devices/system/cpu/cpu" #n "/cache/index3/shared_cpu_list"
    CPU(0), CPU(1), CPU(2), CPU(3), CPU(4), CPU(5), CPU(6), CPU(7),
};

static tree fake;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    tree_init(&fake, "topology", paths, sizeof paths / sizeof paths[0]);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tree_set(&fake, data, size);
    spindle_topology *t = NULL;
    int rc = spindle_topology_load(fake.root, "0-15", &t);
    if (rc != 0) {
        CHECK(t == NULL);
        const char *why = spindle_topology_load_error();
        CHECK(rc == ENOMEM || (why && why[0]));
        return 0;
    }
    CHECK(t != NULL);
    uint32_t nodes = spindle_topology_node_count(t);
    CHECK(nodes >= 1);
    const char *fallback = spindle_topology_fallback(t);
    if (fallback) CHECK(nodes == 1 && fallback[0]);
    uint8_t seen[16] = {0};
    int32_t last_id = -1;
    uint32_t total = 0;
    for (uint32_t n = 0; n < nodes; n++) {
        int32_t id = spindle_topology_node_id(t, n);
        CHECK(id > last_id); /* T2 */
        last_id = id;
        int32_t cpus[16];
        uint32_t count = spindle_topology_node_cpus(t, n, cpus, 16);
        CHECK(count >= 1 && count <= 16);
        for (uint32_t k = 0; k < count; k++) {
            CHECK(cpus[k] >= 0 && cpus[k] < 16);
            CHECK(k == 0 || cpus[k] > cpus[k - 1]); /* T2 */
            CHECK(!seen[cpus[k]]);                  /* T1: one node each */
            seen[cpus[k]] = 1;
        }
        total += count;
        for (uint32_t m = 0; m < nodes; m++) {
            int32_t d = spindle_topology_distance(t, n, m);
            CHECK(d >= 1 && d <= 255); /* T3 */
        }
    }
    CHECK(total == spindle_topology_cpu_count(t)); /* T1: every usable CPU */
    spindle_plan *plan = NULL;
    int prc = spindle_plan_create(t, 0, SPINDLE_PIN_CORE, NULL, 0, &plan);
    CHECK(prc == 0 || prc == ENOMEM);
    spindle_plan_free(plan);
    spindle_topology_free(t);
    return 0;
}
