#!/usr/bin/env bash
# Runs the full benchmark and writes its results into the documents that show them:
# the full table into docs/performance.md and a short one (Spindle's row of each case)
# into README.md, each between its `<!-- bench:begin -->` and `<!-- bench:end -->`
# markers, and the plot into docs/ratios.svg. Arguments go to `bench` (for example
# --reps 5). Nothing is written unless the run succeeds.
set -euo pipefail
cd "$(dirname "$0")/.."
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
scripts/bench.sh --format markdown --output "$out/results.md" --plot "$out/ratios.svg" "$@"
python3 - "$out/results.md" "$out/full.md" "$out/brief.md" <<'PY'
import datetime, sys
results = open(sys.argv[1]).read().strip()
date = datetime.date.today().isoformat()
lines = results.split("\n")
machine = lines[0]
full = (f"`scripts/update-results.sh` on {date}. {machine}\n\n"
        + "\n".join(lines[1:]).strip() + "\n")
# The short table: Spindle's row of each case, its median and its ratios.
rows = [l for l in lines if l.startswith("| ") and not l.startswith("| case")]
short = ["| case | Spindle | unit | against the others in the same run |", "|---|---|---|---|"]
for r in rows:
    cells = [c.strip() for c in r.strip("|").split("|")]
    case, system, _tasks, unit, med = cells[:5]
    ratio = cells[7]
    if system not in ("spindle", "quota-aware"):
        continue
    unit = "p50 latency, ns" if unit.startswith("latency") else unit
    short.append(f"| {case} | {med} | {unit} | {ratio} |")
brief = (f"{machine} ({date}; ratios below 1: Spindle took less time):\n\n" + "\n".join(short) + "\n")
open(sys.argv[2], "w").write(full)
open(sys.argv[3], "w").write(brief)
PY
scripts/splice.py bench docs/performance.md "$out/full.md"
scripts/splice.py bench README.md "$out/brief.md"
cp "$out/ratios.svg" docs/ratios.svg
echo "updated docs/performance.md, README.md and docs/ratios.svg"
