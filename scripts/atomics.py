#!/usr/bin/env python3
"""Atomic read-modify-writes per task, from callgrind's per-instruction counts.

Called by `scripts/instructions.sh --atomics`, which runs the benchmark under callgrind
with `--dump-instr=yes`: every executed instruction's address is then in the profile,
with how often it ran. This script disassembles each object the timed regions ran code
in (`objdump -d`), finds the instructions that lock the cache line they touch — any
`lock`-prefixed one, an `xchg` with memory (locked without the prefix), and `mfence` —
and adds up how often those ran, per region.

An instruction count weighs every instruction alike. A locked one waits until the
core's earlier stores are visible and holds its line exclusively: it costs tens of
cycles when the line is in the core's own cache, and a transfer between cores when it
is not. So the count of them per task is a second noise-free figure beside the
instruction count: it moves only when a change adds or removes an atomic operation, or
a fence, on the path.

Addresses in the profile are offsets into each object (callgrind subtracts the load
address). The script checks that: an object whose counted addresses do not fall on its
instruction boundaries is reported and left out.

  atomics.py WORKDIR [--by-function N]
"""
import collections
import glob
import re
import subprocess
import sys

INSN = re.compile(r"^\s*([0-9a-f]+):\s+(.*)$")
LOCKED = re.compile(r"^(lock\s|xchg\w*\s+\S*\(|xchg\w*\s+%\w+,\S*\(|mfence\b)")


def regions(workdir):
    """Yields (label, {(object, address): count}, {(object, address): function})."""
    for path in sorted(glob.glob(workdir + "/cg.out*")):
        label = None
        costs = collections.Counter()
        owner = {}
        names = {}
        obj = fn = None
        addr = 0
        after_call = False
        for line in open(path, errors="replace"):
            line = line.rstrip("\n")
            if line.startswith("desc: Trigger: Client Request: "):
                label = line.split(": ", 3)[-1].strip()
                continue
            m = re.match(r"^(c?)(ob|fn)=\((\d+)\)(?: (.*))?$", line)
            if m:
                key = (m.group(2), m.group(3))
                if m.group(4):
                    names[key] = m.group(4)
                if not m.group(1):
                    if m.group(2) == "ob":
                        obj = names.get(key)
                    else:
                        fn = names.get(key)
                continue
            if line.startswith("calls="):
                after_call = True
                continue
            m = re.match(r"^(0x[0-9a-f]+|[+-]\d+|\*)\s", line)
            if m:
                a = m.group(1)
                if a.startswith("0x"):
                    addr = int(a, 16)
                elif a[0] == "+":
                    addr += int(a[1:])
                elif a[0] == "-":
                    addr -= int(a[1:])
                if after_call:
                    # The line after `calls=` is the call's inclusive cost, not the
                    # call instruction's own.
                    after_call = False
                    continue
                costs[(obj, addr)] += int(line.split()[-1])
                owner[(obj, addr)] = fn
        if label and not label.startswith("warm-up") and label.count("/") == 2:
            yield label, costs, owner


_disassembly = {}


def disassemble(obj):
    """The instruction addresses of `obj`, and those of its locked instructions."""
    if obj not in _disassembly:
        starts, locked = set(), set()
        try:
            out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", obj],
                                 capture_output=True, text=True, check=True).stdout
        except (OSError, subprocess.CalledProcessError):
            out = ""
        for line in out.splitlines():
            m = INSN.match(line)
            if m:
                a = int(m.group(1), 16)
                starts.add(a)
                if LOCKED.match(m.group(2)):
                    locked.add(a)
        _disassembly[obj] = (starts, locked)
    return _disassembly[obj]


def main():
    workdir = sys.argv[1]
    by_function = int(sys.argv[sys.argv.index("--by-function") + 1]) if "--by-function" in sys.argv else 0
    print(f"{'case':24} {'system':16} {'instructions/task':>18} {'atomics/task':>13}")
    skipped = set()
    for label, costs, owner in regions(workdir):
        case, system, tasks = label.split("/")
        tasks = int(tasks)
        per_object = collections.defaultdict(list)
        for (obj, a), c in costs.items():
            if obj and c:
                per_object[obj].append((a, c))
        atomics = 0
        per_function = collections.Counter()
        for obj, hits in per_object.items():
            starts, locked = disassemble(obj)
            on_boundary = sum(c for a, c in hits if a in starts)
            total = sum(c for a, c in hits)
            if not starts or on_boundary < 0.99 * total:
                skipped.add(obj)
                continue
            for a, c in hits:
                if a in locked:
                    atomics += c
                    per_function[owner[(obj, a)] or "?"] += c
        instructions = sum(costs.values())
        print(f"{case:24} {system:16} {instructions / tasks:18.0f} {atomics / tasks:13.2f}")
        for name, c in per_function.most_common(by_function):
            if c / tasks >= 0.01:
                print(f"{'':42} {c / tasks:13.2f}  {name[:100]}")
    for obj in sorted(skipped):
        print(f"atomics: left out {obj}: its counted addresses are not its instructions'", file=sys.stderr)


if __name__ == "__main__":
    main()
