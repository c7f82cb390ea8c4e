/*
 * topology_plan.c — where a pool's workers go: which node and CPU each runs on, where
 * its memory comes from, and the order in which it looks for work to steal.
 *
 * Planning is three steps over the topology (topology_discovery.c): apportion the
 * workers among the chosen nodes (P1), place each node's workers on its CPUs (P2),
 * then give every worker its steal order (P3).
 *
 * Invariants
 *   P1  Workers are spread over nodes in proportion to usable CPUs (largest remainder).
 *   P2  Within a node, workers take CPUs ordered by (SMT rank, id): one thread per core
 *       before any second hardware thread.
 *   P3  A worker's steal order is the other workers, nearest first, in tiers: same SMT
 *       core, same L3, same node, then each other node by increasing distance. Within
 *       a tier the plan lists workers by index; the scheduler starts at a random member
 *       (worker.c). With node pinning a worker has no fixed CPU, so only node tiers
 *       exist.
 *
 * Because workers are placed node by node (P2), each node's workers are one range of
 * indices: a worker's own-node tiers look only at its range, and each other node is
 * added as its range. With each worker's CPU looked up once, planning is linear in the
 * size of the steal orders it writes. Those orders are quadratic in the workers (each
 * lists all the others): at the engine's limit of 4096 workers, 64 MB.
 */
#include "topology_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* The most nodes a plan spans (node indices of the topology). */
#define MAX_PLAN_NODES 1024

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

/* P1: `w` workers by largest-remainder apportionment over the chosen nodes' CPUs. */
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

/* P2: each node's workers, on its CPUs ordered by (SMT rank, id). */
static int place_workers(const spindle_topology *t, const plan_nodes *pn, spindle_plan *p) {
    spindle_pinning pinning = p->pinning;
    for (uint32_t j = 0; j < pn->count; j++) {
        const node_info *ni = &t->nodes[pn->use[j]];
        int32_t *order = malloc(sizeof(int32_t) * ni->ncpus);
        if (!order) return ENOMEM;
        memcpy(order, ni->cpus, sizeof(int32_t) * ni->ncpus);
        qsort_r(order, ni->ncpus, sizeof(int32_t), by_rank_then_id, (void *)t);
        for (uint32_t k = 0; k < pn->quota[j]; k++) {
            plan_worker *pw = &p->workers[pn->first[j] + k];
            pw->node = ni->id;
            pw->node_index = pn->use[j];
            pw->home_cpu = pinning == SPINDLE_PIN_CORE ? order[k % ni->ncpus] : -1;
            pw->cpu = pw->home_cpu;
            pw->npin = pinning == SPINDLE_PIN_CORE ? 1 : pinning == SPINDLE_PIN_NODE ? ni->ncpus : 0;
            pw->pin = malloc(sizeof(int32_t) * (pw->npin ? pw->npin : 1));
            if (!pw->pin) {
                free(order);
                return ENOMEM;
            }
            if (pinning == SPINDLE_PIN_CORE) pw->pin[0] = pw->cpu;
            if (pinning == SPINDLE_PIN_NODE) memcpy(pw->pin, ni->cpus, sizeof(int32_t) * ni->ncpus);
            pw->mem_node = memory_node(t, pn->use[j]);
        }
        free(order);
    }
    return 0;
}

/* Scratch for steal_order, allocated once per plan. */
typedef struct steal_scratch {
    const spindle_cpu_info **infos; /* by worker: its home CPU, or NULL */
    uint32_t *pos_of;               /* node index -> position in plan_nodes.use */
    bool *placed;                   /* by worker */
    bool *node_done;                /* by node index */
} steal_scratch;

/* Appends the workers in [from, to) not yet placed that `in` admits, as one tier. */
static void add_tier(plan_worker *me, steal_scratch *s, uint32_t from, uint32_t to, int tier,
                     const spindle_cpu_info *mine) {
    uint32_t start = me->nsteal;
    for (uint32_t b = from; b < to; b++) {
        if (s->placed[b]) continue;
        const spindle_cpu_info *theirs = s->infos[b];
        bool in = tier >= 2 ||
                  (tier == 0 && theirs && theirs->smt_group == mine->smt_group) ||
                  (tier == 1 && theirs && mine->l3_group >= 0 && theirs->l3_group == mine->l3_group);
        if (!in) continue;
        me->steal[me->nsteal++] = b;
        s->placed[b] = true;
    }
    if (me->nsteal > start) me->tier_start[me->ntiers++] = start;
}

/* P3 for worker `a`: its own core's workers, its L3's, its node's, then each other
 * node by distance from ours, then by node id. A tier with no members is skipped. */
static int steal_order(const spindle_topology *t, const plan_nodes *pn, spindle_plan *p, uint32_t a,
                       steal_scratch *s) {
    uint32_t w = p->nworkers;
    plan_worker *me = &p->workers[a];
    me->steal = malloc(sizeof(uint32_t) * (w ? w : 1));
    me->tier_start = malloc(sizeof(uint32_t) * (w + pn->count + 4));
    if (!me->steal || !me->tier_start) return ENOMEM;
    memset(s->placed, 0, sizeof(bool) * w);
    memset(s->node_done, 0, sizeof(bool) * t->nnodes);
    s->placed[a] = true;
    const spindle_cpu_info *mine = s->infos[a];
    uint32_t own = s->pos_of[me->node_index];
    for (int tier = mine ? 0 : 2; tier < 3; tier++)
        add_tier(me, s, pn->first[own], pn->first[own] + pn->quota[own], tier, mine);
    s->node_done[me->node_index] = true;
    for (;;) {
        int32_t best = -1;
        for (uint32_t j = 0; j < pn->count; j++) {
            uint32_t ni = pn->use[j];
            if (s->node_done[ni]) continue;
            if (best < 0) {
                best = (int32_t)ni;
                continue;
            }
            int32_t d1 = spindle_topology_distance(t, me->node_index, ni);
            int32_t d0 = spindle_topology_distance(t, me->node_index, (uint32_t)best);
            if (d1 < d0 || (d1 == d0 && t->nodes[ni].id < t->nodes[best].id)) best = (int32_t)ni;
        }
        if (best < 0) break;
        s->node_done[best] = true;
        uint32_t j = s->pos_of[best];
        add_tier(me, s, pn->first[j], pn->first[j] + pn->quota[j], 2, mine);
    }
    me->tier_start[me->ntiers] = me->nsteal;
    return 0;
}

/* P3 for every worker. */
static int steal_orders(const spindle_topology *t, const plan_nodes *pn, spindle_plan *p) {
    uint32_t w = p->nworkers;
    steal_scratch s = {
        .infos = malloc(sizeof *s.infos * (w ? w : 1)),
        .pos_of = calloc(t->nnodes ? t->nnodes : 1, sizeof(uint32_t)),
        .placed = calloc(w ? w : 1, sizeof(bool)),
        .node_done = calloc(t->nnodes ? t->nnodes : 1, sizeof(bool)),
    };
    int rc = s.infos && s.pos_of && s.placed && s.node_done ? 0 : ENOMEM;
    if (!rc) {
        for (uint32_t j = 0; j < pn->count; j++) s.pos_of[pn->use[j]] = j;
        for (uint32_t b = 0; b < w; b++)
            s.infos[b] = p->workers[b].home_cpu >= 0 ? spindle_topology_find_cpu(t, p->workers[b].home_cpu) : NULL;
    }
    for (uint32_t a = 0; !rc && a < w; a++) rc = steal_order(t, pn, p, a, &s);
    free(s.infos);
    free(s.pos_of);
    free(s.placed);
    free(s.node_done);
    return rc;
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
    if (!rc) rc = steal_orders(t, pn, p);
    free(pn);
    if (rc) {
        spindle_plan_free(p);
        return rc;
    }
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
