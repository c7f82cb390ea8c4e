/*
 * topology_internal.h — the topology and the plan, as discovery (topology_discovery.c)
 * builds the first and planning (topology_plan.c) builds the second from it. Only
 * those two files see these structures; everyone else uses spindle_topology.h.
 */
#ifndef SPINDLE_TOPOLOGY_INTERNAL_H
#define SPINDLE_TOPOLOGY_INTERNAL_H

#include "internal.h"
#include "spindle_topology.h"

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
    uint32_t group;   /* its node's place among the plan's nodes */
    spindle_tier local[3]; /* its tiers within its node (PL3), nearest first */
    uint32_t nlocal;
    int32_t mem_node; /* node its memory comes from (nearest with memory) */
} plan_worker;

/* Sizes are linear in the workers and CPUs, plus the square of the nodes (the remote
 * tiers, like the distance table they are read from). */
struct spindle_plan {
    plan_worker *workers;
    uint32_t nworkers;
    spindle_pinning pinning;
    uint32_t *order;        /* nworkers: worker indices, node by node (PL3) */
    uint32_t ngroups;       /* the plan's nodes */
    spindle_tier *remote;   /* group g's remote tiers: [remote_at[g], remote_at[g + 1]) */
    uint32_t *remote_at;    /* ngroups + 1 */
    int32_t *group_cpus;    /* group g's CPUs: [cpus_at[g], cpus_at[g + 1]) */
    uint32_t *cpus_at;      /* ngroups + 1 */
};

/* The CPU `id` of the topology, or NULL (topology_discovery.c). */
const spindle_cpu_info *spindle_topology_find_cpu(const spindle_topology *t, int32_t id);

#endif
