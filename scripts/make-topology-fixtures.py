#!/usr/bin/env python3
"""Writes the sysfs fixture trees under Tests/SpindleTests/Fixtures/topology/.

Each tree holds only the files Spindle reads (topology_discovery.c). Run again after editing;
the trees are committed so tests need no Python.

With --many-core NODES CORES DIR it writes one large machine to DIR instead, for planning
at scale (docs/performance.md): NODES nodes of CORES two-thread cores, eight cores to an
L3, numbered as x86 Linux numbers them. PlanScalingTests builds the same shape in Swift.
"""
import os, shutil, sys

ROOT = os.path.join(os.path.dirname(__file__), "..", "Tests", "SpindleTests", "Fixtures", "topology")

def ranges(ids):
    ids = sorted(ids); out = []; i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1: j += 1
        out.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}"); i = j + 1
    return ",".join(out)

def write(base, rel, text):
    p = os.path.join(base, rel); os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "w") as f: f.write(text + "\n")

def machine(name, cpus, nodes, online=None, node_online=True, memoryless=()):
    """cpus: {id: (package, core, siblings, l3)}; nodes: {id: ([cpus], [distances])}."""
    base = os.path.join(ROOT, name)
    shutil.rmtree(base, ignore_errors=True)
    write(base, "devices/system/cpu/online", ranges(online if online is not None else cpus.keys()))
    for c, (pkg, core, sib, l3) in cpus.items():
        d = f"devices/system/cpu/cpu{c}"
        write(base, f"{d}/topology/physical_package_id", str(pkg))
        write(base, f"{d}/topology/core_id", str(core))
        write(base, f"{d}/topology/thread_siblings_list", ranges(sib))
        if l3 is not None: write(base, f"{d}/cache/index3/shared_cpu_list", ranges(l3))
    if node_online:
        write(base, "devices/system/node/online", ranges(nodes.keys()))
        for n, (ncpus, dist) in nodes.items():
            write(base, f"devices/system/node/node{n}/cpulist", ranges(ncpus))
            write(base, f"devices/system/node/node{n}/distance", " ".join(map(str, dist)))
            mem = 0 if n in memoryless else 16 * 1024 * 1024
            write(base, f"devices/system/node/node{n}/meminfo", f"Node {n} MemTotal:       {mem} kB")

def many_core(nodes, cores, base):
    firsts = nodes * cores
    cpus = {}
    for c in range(2 * firsts):
        core = c % firsts; g = core // 8 * 8
        cpus[c] = (core // cores // 2, core % cores, [core, core + firsts],
                   list(range(g, g + 8)) + list(range(g + firsts, g + firsts + 8)))
    dist = lambda a, b: 10 if a == b else 16 if a // 2 == b // 2 else 20 + abs(a - b)
    machine(os.path.abspath(base), cpus,
            {n: ([c for c in cpus if (c % firsts) // cores == n], [dist(n, m) for m in range(nodes)])
             for n in range(nodes)})

if len(sys.argv) == 5 and sys.argv[1] == "--many-core":
    many_core(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
    sys.exit(0)

# 2 sockets x 8 cores x 2 threads: node0 = 0-7,16-23; node1 = 8-15,24-31; siblings c, c+16.
cpus = {}
for c in range(32):
    pkg = (c % 16) // 8; core = c % 8; sib = [c % 16, c % 16 + 16]
    l3 = [x for x in range(32) if (x % 16) // 8 == pkg]
    cpus[c] = (pkg, core, sib, l3)
machine("two-socket-smt", cpus, {0: ([c for c in range(32) if (c % 16) < 8], [10, 21]),
                                 1: ([c for c in range(32) if (c % 16) >= 8], [21, 10])})

# One socket, 16 cores, no SMT, four CCXs of four cores sharing an L3 each.
cpus = {c: (0, c, [c], list(range(c // 4 * 4, c // 4 * 4 + 4))) for c in range(16)}
machine("epyc-4ccx", cpus, {0: (list(range(16)), [10])})

# Sparse and offline: CPUs 0-7 exist, 2, 3 and 6 are offline; two nodes.
cpus = {c: (c // 4, c % 4, [c], list(range(c // 4 * 4, c // 4 * 4 + 4))) for c in range(8)}
machine("sparse-offline", cpus, {0: ([0, 1, 2, 3], [10, 20]), 1: ([4, 5, 6, 7], [20, 10])},
        online=[0, 1, 4, 5, 7])

# Node 1 has CPUs but no memory; node 2 is further away than node 1 from node 0.
cpus = {c: (c // 4, c % 4, [c], list(range(c // 4 * 4, c // 4 * 4 + 4))) for c in range(12)}
machine("memoryless-node", cpus, {0: ([0, 1, 2, 3], [10, 16, 32]), 1: ([4, 5, 6, 7], [16, 10, 16]),
                                  2: ([8, 9, 10, 11], [32, 16, 10])}, memoryless={1})

# No node directory at all (some containers): falls back to one node.
cpus = {c: (0, c, [c], None) for c in range(4)}
machine("no-numa", cpus, {}, node_online=False)
