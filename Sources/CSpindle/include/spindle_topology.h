/*
 * spindle_topology.h — the machine as Spindle sees it, and where it puts its workers.
 *
 * A topology is read from a sysfs tree (default "/sys"; the environment variable
 * SPINDLE_SYSFS_ROOT or an explicit root overrides it, so tests and capacity planning
 * can describe machines this one is not) and intersected with a CPU mask (the process
 * affinity by default). A plan assigns workers to nodes and CPUs and gives each worker
 * the order in which it steals from the others.
 */
#ifndef SPINDLE_TOPOLOGY_H
#define SPINDLE_TOPOLOGY_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct spindle_topology spindle_topology;
typedef struct spindle_plan spindle_plan;

/** One usable CPU. Groups are named by their smallest CPU id. */
typedef struct spindle_cpu_info {
    int32_t id;
    int32_t node;
    int32_t package;    /* physical_package_id, -1 if unknown                    */
    int32_t core;       /* core_id, -1 if unknown                                */
    int32_t smt_group;  /* smallest id among thread_siblings_list (self if none) */
    int32_t l3_group;   /* smallest id among index3/shared_cpu_list, -1 unknown  */
    int32_t smt_rank;   /* position among its SMT siblings (0 = first thread)    */
} spindle_cpu_info;

/**
 * Reads the topology under `sysfs_root` (NULL: $SPINDLE_SYSFS_ROOT, else "/sys"),
 * restricted to the CPUs in `cpu_list` ("0-63,128-191"; NULL: the calling thread's
 * affinity mask, or on a Spindle worker the mask its pool was planned for). When the
 * tree is partial or, for the real /sys, libnuma reports NUMA unavailable, the result
 * is one node holding every usable CPU, and
 * `spindle_topology_fallback` says why. Returns 0, EINVAL (bad list, or no usable CPU),
 * or ENOMEM.
 */
int spindle_topology_load(const char *sysfs_root, const char *cpu_list, spindle_topology **out);
/** Why the calling thread's last spindle_topology_load failed (a sentence naming the
 *  file or the argument), or NULL; valid until that thread's next load. Load returns
 *  ENOENT for a sysfs root that is not a directory, EBADMSG for a tree whose list of
 *  online CPUs is empty or malformed, EINVAL for a malformed CPU list or one with no
 *  online CPU. */
const char *spindle_topology_load_error(void);
void spindle_topology_free(spindle_topology *topo);

uint32_t spindle_topology_cpu_count(const spindle_topology *topo);
spindle_cpu_info spindle_topology_cpu(const spindle_topology *topo, uint32_t index);
uint32_t spindle_topology_node_count(const spindle_topology *topo);
int32_t spindle_topology_node_id(const spindle_topology *topo, uint32_t index);
/** The usable CPUs of node `index`, ascending; returns how many (copies up to cap). */
uint32_t spindle_topology_node_cpus(const spindle_topology *topo, uint32_t index, int32_t *out, uint32_t cap);
/** Distance between nodes (by index) as sysfs reports it; 10 for the same node. */
int32_t spindle_topology_distance(const spindle_topology *topo, uint32_t from, uint32_t to);
/** NULL, or why the topology fell back to a single node. */
const char *spindle_topology_fallback(const spindle_topology *topo);

typedef enum spindle_pinning {
    /** Each worker may run on any CPU of its node (the default). */
    SPINDLE_PIN_NODE = 0,
    /** Each worker is pinned to one CPU. */
    SPINDLE_PIN_CORE = 1,
    /** No pinning at all. */
    SPINDLE_PIN_NONE = 2,
} spindle_pinning;

/**
 * Plans `workers` workers (0: one per usable CPU) over `topo`, restricted to the nodes
 * in `node_ids` when `node_count` > 0. Workers are spread over nodes in proportion to
 * their usable CPUs; within a node they take one thread per core before any SMT
 * sibling. Each worker's steal order lists the other workers nearest first: SMT
 * siblings, then the same L3, then the same node, then other nodes by distance (ties
 * by id); with node pinning only the node tiers apply. Returns 0, EINVAL or ENOMEM.
 */
int spindle_plan_create(const spindle_topology *topo, uint32_t workers, spindle_pinning pinning,
                        const int32_t *node_ids, uint32_t node_count, spindle_plan **out);
void spindle_plan_free(spindle_plan *plan);

uint32_t spindle_plan_worker_count(const spindle_plan *plan);
/** The CPU the worker is pinned to, or -1 (node or no pinning). */
int32_t spindle_plan_worker_cpu(const spindle_plan *plan, uint32_t worker);
int32_t spindle_plan_worker_node(const spindle_plan *plan, uint32_t worker);
/** The worker's steal order (other workers' indices); returns the count. */
uint32_t spindle_plan_steal_order(const spindle_plan *plan, uint32_t worker, uint32_t *out, uint32_t cap);
/** The node the worker's memory (its deque) is allocated on: its own node, or for a
 *  memoryless node the nearest node with memory. */
int32_t spindle_plan_worker_memory_node(const spindle_plan *plan, uint32_t worker);
/** The CPUs the worker's thread is restricted to (none: unpinned); returns the count. */
uint32_t spindle_plan_worker_pin(const spindle_plan *plan, uint32_t worker, int32_t *out, uint32_t cap);
/** Where tier boundaries fall in the steal order: tier k is [start(k), start(k+1)). */
uint32_t spindle_plan_tier_count(const spindle_plan *plan, uint32_t worker);
uint32_t spindle_plan_tier_start(const spindle_plan *plan, uint32_t worker, uint32_t tier);

#ifdef __cplusplus
}
#endif

#endif
