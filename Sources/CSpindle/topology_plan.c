/*
 * topology_plan.c — where a pool's workers go: which node and CPU each runs on, where
 * its memory comes from, and the order in which it looks for work to steal.
 *
 * Planning is three steps over the topology (topology_discovery.c): apportion the
 * workers among the chosen nodes (PL1), place each node's workers on its CPUs (PL2),
 * then give every worker its steal order (PL3).
 *
 * Invariants
 *   PL1  Workers are spread over nodes in proportion to usable CPUs (largest remainder).
 *   PL2  Within a node, workers take CPUs ordered by (SMT rank, id): one thread per core
 *       before any second hardware thread.
 *   PL3  A worker's steal order is the other workers, nearest first, in tiers: same SMT
 *       core, same L3, same node, then each other node by increasing distance (ties by
 *       node id). Within a tier the plan lists workers by index; the scheduler starts at
 *       a random member (worker.c). With node pinning a worker has no fixed CPU, so only
 *       node tiers exist.
 *
 * How PL3 is stored. The plan keeps one ordering of all the workers (`order`), node by
 * node, and within a node sorted by (L3, SMT core, index). Every group PL3 names is then
 * one range of it, nested in the next: the worker itself in its core's range, the core
 * in its L3's, the L3 in its node's. A tier is a range less the range inside it that an
 * earlier tier covered (spindle_tier, internal.h), so a worker carries at most three
 * tiers of its own; the tiers to other nodes are the same for every worker of a node,
 * and are kept once per node. A plan, and a pool made from it, takes memory linear in
 * the workers and CPUs, plus the square of the nodes, as the distance table does;
 * planning is the sort of each node's workers.
 *
 * Rejected: a list per worker of all the others, cut into tiers. It is the simplest
 * thing for the steal loop to walk, and it is quadratic in the workers: at the engine's
 * limit of 4096 workers, each of them lists 4095 others. The ranges cost the steal
 * loop one comparison per victim. Also rejected: numbering the workers so that each
 * core and L3 is a range of indices. PL2 numbers them to fill one thread per core
 * first, so that a pool smaller than the machine gets whole cores, and that order is
 * what a worker's index means to its users (the plan, the topology JSON).
 *
 * PL3 assumes an SMT core lies within one L3 and one node, as on every machine Linux
 * describes; a tree that says otherwise puts a core's threads in separate tiers.
 */
#include "topology_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* The most nodes a plan spans (node indices of the topology). */
#define MAX_PLAN_NODES 1024

void spindle_plan_free(spindle_plan *p) {
    if (!p) return;
    free(p->workers);
    free(p->order);
    free(p->remote);
    free(p->remote_at);
    free(p->group_cpus);
    free(p->cpus_at);
    free(p);
}

static int by_rank_then_id(const void *a, const void *b, void *topo) {
    const spindle_cpu_info *x = spindle_topology_find_cpu(topo, *(const int32_t *)a);
    const spindle_cpu_info *y = spindle_topology_find_cpu(topo, *(const int32_t *)b);
    if (x->smt_rank != y->smt_rank) return x->smt_rank - y->smt_rank;
    return x->id - y->id;
}

/* The chosen nodes of a plan and each one's share of the workers: `use[j]` is a node
 * index of the topology, and its workers are indices first[j] ..< first[j] + quota[j]. */
typedef struct plan_nodes {
    uint32_t use[MAX_PLAN_NODES];
    uint32_t quota[MAX_PLAN_NODES];
    uint32_t first[MAX_PLAN_NODES];
    uint32_t count;
    uint32_t cpus; /* usable CPUs on the chosen nodes */
} plan_nodes;

/* The nodes to use: the listed ids, or every node. */
static void choose_nodes(const spindle_topology *t, const int32_t *node_ids, uint32_t node_count, plan_nodes *pn) {
    pn->count = pn->cpus = 0;
    for (uint32_t i = 0; i < t->nnodes && pn->count < MAX_PLAN_NODES; i++) {
        bool wanted = node_count == 0;
        for (uint32_t k = 0; k < node_count; k++) wanted |= node_ids[k] == t->nodes[i].id;
        if (!wanted) continue;
        pn->use[pn->count++] = i;
        pn->cpus += t->nodes[i].ncpus;
    }
}

/* PL1: `w` workers by largest-remainder apportionment over the chosen nodes' CPUs. */
static void apportion(const spindle_topology *t, uint32_t w, plan_nodes *pn) {
    uint64_t rem[MAX_PLAN_NODES];
    uint32_t given = 0;
    for (uint32_t j = 0; j < pn->count; j++) {
        uint64_t exact = (uint64_t)w * t->nodes[pn->use[j]].ncpus;
        pn->quota[j] = (uint32_t)(exact / pn->cpus);
        rem[j] = exact % pn->cpus;
        given += pn->quota[j];
    }
    while (given < w) {
        uint32_t best = 0;
        for (uint32_t j = 1; j < pn->count; j++)
            if (rem[j] > rem[best]) best = j;
        pn->quota[best]++;
        rem[best] = 0;
        given++;
    }
    for (uint32_t j = 0, at = 0; j < pn->count; j++) {
        pn->first[j] = at;
        at += pn->quota[j];
    }
}

/* The node a worker on node index `ni` takes memory from: its own, or the nearest
 * node that has memory. */
static int32_t memory_node(const spindle_topology *t, uint32_t ni) {
    if (t->nodes[ni].has_memory) return t->nodes[ni].id;
    int32_t best = -1;
    for (uint32_t m = 0; m < t->nnodes; m++) {
        if (!t->nodes[m].has_memory) continue;
        if (best < 0 || spindle_topology_distance(t, ni, m) < spindle_topology_distance(t, ni, (uint32_t)best))
            best = (int32_t)m;
    }
    return best >= 0 ? t->nodes[best].id : t->nodes[ni].id;
}

/* PL2: each node's workers, on its CPUs ordered by (SMT rank, id). Each node's CPUs
 * are also copied into the plan, once, for node pinning. */
static int place_workers(const spindle_topology *t, const plan_nodes *pn, spindle_plan *p) {
    p->ngroups = pn->count;
    p->cpus_at = malloc(sizeof(uint32_t) * (pn->count + 1));
    p->group_cpus = malloc(sizeof(int32_t) * (pn->cpus ? pn->cpus : 1));
    if (!p->cpus_at || !p->group_cpus) return ENOMEM;
    p->cpus_at[0] = 0;
    for (uint32_t j = 0; j < pn->count; j++) {
        const node_info *ni = &t->nodes[pn->use[j]];
        int32_t *order = p->group_cpus + p->cpus_at[j];
        p->cpus_at[j + 1] = p->cpus_at[j] + ni->ncpus;
        memcpy(order, ni->cpus, sizeof(int32_t) * ni->ncpus);
        for (uint32_t k = 0; k < pn->quota[j]; k++) {
            plan_worker *pw = &p->workers[pn->first[j] + k];
            pw->node = ni->id;
            pw->node_index = pn->use[j];
            pw->group = j;
            pw->mem_node = memory_node(t, pn->use[j]);
        }
        if (p->pinning != SPINDLE_PIN_CORE) {
            for (uint32_t k = 0; k < pn->quota[j]; k++) p->workers[pn->first[j] + k].cpu = -1;
            continue;
        }
        /* Sorted for placement, then back to ascending ids for the pin list. */
        qsort_r(order, ni->ncpus, sizeof(int32_t), by_rank_then_id, (void *)t);
        for (uint32_t k = 0; k < pn->quota[j]; k++) p->workers[pn->first[j] + k].cpu = order[k % ni->ncpus];
        memcpy(order, ni->cpus, sizeof(int32_t) * ni->ncpus);
    }
    for (uint32_t w = 0; w < p->nworkers; w++) p->workers[w].home_cpu = p->workers[w].cpu;
    return 0;
}

/* A worker's place in its node's ordering (PL3): its home CPU's L3 and core, or -1
 * without a home CPU, then its index. */
typedef struct order_key {
    int32_t l3, core;
} order_key;

static int by_key_then_index(const void *a, const void *b, void *keys) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    const order_key *k = keys;
    if (k[x].l3 != k[y].l3) return k[x].l3 < k[y].l3 ? -1 : 1;
    if (k[x].core != k[y].core) return k[x].core < k[y].core ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* PL3, within each node: the node's workers sorted into the plan's order, then each
 * worker's own tiers cut from the runs of equal L3 and core around its position. */
static int local_tiers(const spindle_topology *t, const plan_nodes *pn, spindle_plan *p) {
    uint32_t w = p->nworkers;
    order_key *keys = malloc(sizeof *keys * (w ? w : 1));
    p->order = malloc(sizeof(uint32_t) * (w ? w : 1));
    if (!keys || !p->order) {
        free(keys);
        return ENOMEM;
    }
    for (uint32_t b = 0; b < w; b++) {
        const spindle_cpu_info *c =
            p->workers[b].home_cpu >= 0 ? spindle_topology_find_cpu(t, p->workers[b].home_cpu) : NULL;
        /* Without a known L3, a core is its own L3 group: no L3 tier. Without a home
         * CPU, each worker is its own group: only node tiers. */
        keys[b] = c ? (order_key){c->l3_group >= 0 ? c->l3_group : -1 - c->smt_group, c->smt_group}
                    : (order_key){INT32_MIN + (int32_t)b, INT32_MIN + (int32_t)b};
        p->order[b] = b;
    }
    for (uint32_t j = 0; j < pn->count; j++) {
        uint32_t lo = pn->first[j], hi = lo + pn->quota[j];
        qsort_r(p->order + lo, hi - lo, sizeof(uint32_t), by_key_then_index, keys);
        /* One pass per run kind: each run [r, e) of equal key gives its members' range. */
        for (uint32_t r = lo, e; r < hi; r = e) {
            order_key k = keys[p->order[r]];
            for (e = r + 1; e < hi && keys[p->order[e]].l3 == k.l3; e++) {}
            for (uint32_t q = r, f; q < e; q = f) {
                for (f = q + 1; f < e && keys[p->order[f]].core == keys[p->order[q]].core; f++) {}
                for (uint32_t pos = q; pos < f; pos++) {
                    plan_worker *pw = &p->workers[p->order[pos]];
                    spindle_tier tiers[3] = {
                        {q, f, pos, pos + 1}, /* the core, less itself */
                        {r, e, q, f},         /* the L3, less the core */
                        {lo, hi, r, e},       /* the node, less the L3 */
                    };
                    pw->nlocal = 0;
                    for (int i = 0; i < 3; i++)
                        if (spindle_tier_size(tiers[i])) pw->local[pw->nlocal++] = tiers[i];
                }
            }
        }
    }
    free(keys);
    return 0;
}

/* PL3, across nodes: for each node, the other nodes' ranges, nearest first (ties by node
 * id), skipping nodes without workers. */
static int remote_tiers(const spindle_topology *t, const plan_nodes *pn, spindle_plan *p) {
    uint32_t g = pn->count;
    p->remote_at = malloc(sizeof(uint32_t) * (g + 1));
    p->remote = malloc(sizeof(spindle_tier) * (g ? (size_t)g * g : 1));
    uint32_t *others = malloc(sizeof(uint32_t) * (g ? g : 1));
    if (!p->remote_at || !p->remote || !others) {
        free(others);
        return ENOMEM;
    }
    p->remote_at[0] = 0;
    for (uint32_t j = 0; j < g; j++) {
        uint32_t me = pn->use[j], n = 0;
        for (uint32_t k = 0; k < g; k++)
            if (k != j && pn->quota[k]) others[n++] = k;
        /* Insertion sort by (distance, id): nodes are few, and the list is built once. */
        for (uint32_t a = 1; a < n; a++) {
            uint32_t x = others[a], b = a;
            int32_t dx = spindle_topology_distance(t, me, pn->use[x]);
            for (; b > 0; b--) {
                uint32_t y = others[b - 1];
                int32_t dy = spindle_topology_distance(t, me, pn->use[y]);
                if (dy < dx || (dy == dx && t->nodes[pn->use[y]].id < t->nodes[pn->use[x]].id)) break;
                others[b] = y;
            }
            others[b] = x;
        }
        spindle_tier *out = p->remote + p->remote_at[j];
        for (uint32_t a = 0; a < n; a++) {
            uint32_t lo = pn->first[others[a]];
            out[a] = (spindle_tier){lo, lo + pn->quota[others[a]], lo, lo};
        }
        p->remote_at[j + 1] = p->remote_at[j] + n;
    }
    free(others);
    return 0;
}

int spindle_plan_create(const spindle_topology *t, uint32_t workers, spindle_pinning pinning,
                        const int32_t *node_ids, uint32_t node_count, spindle_plan **out) {
    *out = NULL;
    if (pinning > SPINDLE_PIN_NONE) return EINVAL;
    plan_nodes *pn = malloc(sizeof *pn);
    if (!pn) return ENOMEM;
    choose_nodes(t, node_ids, node_count, pn);
    uint32_t w = workers ? workers : pn->cpus;
    if (pn->count == 0 || pn->cpus == 0 || w > SPINDLE_MAX_WORKERS) {
        free(pn);
        return EINVAL;
    }
    apportion(t, w, pn);
    spindle_plan *p = calloc(1, sizeof *p);
    int rc = p && (p->workers = calloc(w, sizeof(plan_worker))) ? 0 : ENOMEM;
    if (!rc) {
        p->nworkers = w;
        p->pinning = pinning;
        rc = place_workers(t, pn, p);
    }
    if (!rc) rc = local_tiers(t, pn, p);
    if (!rc) rc = remote_tiers(t, pn, p);
    free(pn);
    if (rc) {
        spindle_plan_free(p);
        return rc;
    }
    *out = p;
    return 0;
}

/* Every tier of worker `w`, local then remote: at most 3 + the plan's nodes. */
static uint32_t all_tiers(const spindle_plan *p, uint32_t w, spindle_tier *out) {
    uint32_t n = spindle_plan_local_tiers(p, w, out), nremote;
    const spindle_tier *remote = spindle_plan_remote_tiers(p, w, &nremote);
    memcpy(out + n, remote, sizeof(spindle_tier) * nremote);
    return n + nremote;
}

static int by_index(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* The lists are built from the ranges on demand: these accessors are for inspection
 * (tests, the topology JSON), not for the scheduler. */
uint32_t spindle_plan_steal_order(const spindle_plan *p, uint32_t w, uint32_t *out, uint32_t cap) {
    spindle_tier *tiers = malloc(sizeof(spindle_tier) * (p->ngroups + 3));
    uint32_t *members = malloc(sizeof(uint32_t) * (p->nworkers ? p->nworkers : 1));
    uint32_t total = 0;
    if (tiers && members) {
        uint32_t nt = all_tiers(p, w, tiers);
        for (uint32_t i = 0; i < nt; i++) {
            uint32_t size = spindle_tier_size(tiers[i]);
            for (uint32_t k = 0; k < size; k++) members[k] = p->order[spindle_tier_at(tiers[i], k)];
            qsort(members, size, sizeof(uint32_t), by_index);
            for (uint32_t k = 0; k < size && total + k < cap; k++) out[total + k] = members[k];
            total += size;
        }
    }
    free(tiers);
    free(members);
    return total;
}

uint32_t spindle_plan_tier_count(const spindle_plan *p, uint32_t w) {
    return p->workers[w].nlocal + (p->remote_at[p->workers[w].group + 1] - p->remote_at[p->workers[w].group]);
}

uint32_t spindle_plan_tier_start(const spindle_plan *p, uint32_t w, uint32_t tier) {
    uint32_t start = 0, nremote;
    const plan_worker *pw = &p->workers[w];
    const spindle_tier *remote = spindle_plan_remote_tiers(p, w, &nremote);
    for (uint32_t i = 0; i < tier && i < pw->nlocal + nremote; i++)
        start += spindle_tier_size(i < pw->nlocal ? pw->local[i] : remote[i - pw->nlocal]);
    return start;
}

uint32_t spindle_plan_worker_count(const spindle_plan *p) { return p->nworkers; }
int32_t spindle_plan_worker_cpu(const spindle_plan *p, uint32_t w) { return p->workers[w].cpu; }
int32_t spindle_plan_worker_node(const spindle_plan *p, uint32_t w) { return p->workers[w].node; }
int32_t spindle_plan_worker_memory_node(const spindle_plan *p, uint32_t w) { return p->workers[w].mem_node; }

uint32_t spindle_plan_worker_pin(const spindle_plan *p, uint32_t w, int32_t *out, uint32_t cap) {
    uint32_t n;
    const int32_t *pin = spindle_plan_pin_list(p, w, &n);
    for (uint32_t k = 0; k < n && k < cap; k++) out[k] = pin[k];
    return n;
}

/* ---- for the pool (internal.h) ------------------------------------------------------ */

const uint32_t *spindle_plan_order(const spindle_plan *p) { return p->order; }

uint32_t spindle_plan_local_tiers(const spindle_plan *p, uint32_t w, spindle_tier out[3]) {
    memcpy(out, p->workers[w].local, sizeof(spindle_tier) * p->workers[w].nlocal);
    return p->workers[w].nlocal;
}

const spindle_tier *spindle_plan_remote_tiers(const spindle_plan *p, uint32_t w, uint32_t *count) {
    uint32_t g = p->workers[w].group;
    *count = p->remote_at[g + 1] - p->remote_at[g];
    return p->remote + p->remote_at[g];
}

const int32_t *spindle_plan_pin_list(const spindle_plan *p, uint32_t w, uint32_t *count) {
    const plan_worker *pw = &p->workers[w];
    switch (p->pinning) {
    case SPINDLE_PIN_CORE:
        *count = 1;
        return &pw->cpu;
    case SPINDLE_PIN_NODE:
        *count = p->cpus_at[pw->group + 1] - p->cpus_at[pw->group];
        return p->group_cpus + p->cpus_at[pw->group];
    default:
        *count = 0;
        return NULL;
    }
}

static void *copy_of(const void *from, size_t bytes) {
    void *to = malloc(bytes ? bytes : 1);
    if (to && bytes) memcpy(to, from, bytes);
    return to;
}

spindle_plan *spindle_plan_clone(const spindle_plan *p) {
    spindle_plan *c = malloc(sizeof *c);
    if (!c) return NULL;
    *c = *p;
    uint32_t g = p->ngroups;
    c->workers = copy_of(p->workers, sizeof(plan_worker) * p->nworkers);
    c->order = copy_of(p->order, sizeof(uint32_t) * p->nworkers);
    c->remote = copy_of(p->remote, sizeof(spindle_tier) * p->remote_at[g]);
    c->remote_at = copy_of(p->remote_at, sizeof(uint32_t) * (g + 1));
    c->group_cpus = copy_of(p->group_cpus, sizeof(int32_t) * p->cpus_at[g]);
    c->cpus_at = copy_of(p->cpus_at, sizeof(uint32_t) * (g + 1));
    if (!c->workers || !c->order || !c->remote || !c->remote_at || !c->group_cpus || !c->cpus_at) {
        spindle_plan_free(c);
        return NULL;
    }
    return c;
}
