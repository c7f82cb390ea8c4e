#!/usr/bin/env python3
"""Turns scripts/service-bench.sh's measurements into its report.

Each input line is one run: a strategy (or `unloaded`: the light endpoint alone, or
`*-overload`: admission control at twice the connections), its round, the heavy
endpoint's wrk summary, the light endpoint's, and the server's CPU time. Per strategy,
over the rounds: the median heavy throughput (successful requests per second); the
median of the light endpoint's requests per second, p50, p99 and p99.9; the totals of
503s and failures; and the median CPU time per heavy request, of the work alone and of
the whole server. Ratios are against the best strategy that is not Spindle's in the
same run: the median of the ratios of the two strategies' runs in each round, with the
lowest and highest.
"""
import argparse
import json
import statistics
import sys

PEERS = ("inline", "detached", "nio")


def is_spindle(name):
    """Spindle's strategies, at any class (spindle-background), not the overload run."""
    return name.startswith("spindle") and not name.endswith("-overload")


def load(path):
    runs = {}
    for line in open(path):
        line = line.strip()
        if not line:
            continue
        r = json.loads(line)
        runs.setdefault(r["label"], []).append(r)
    return runs


def per_request(runs, key):
    """The median over the rounds of the server's CPU time `key` per heavy request."""
    xs = [r["server_cpu"][key] / r["server_cpu"]["heavy"] / 1000 for r in runs
          if r.get("server_cpu") and r["server_cpu"]["heavy"] > 0]
    return statistics.median(xs) if xs else None


def summarise(label, runs):
    heavy = [r["heavy"] for r in runs if r["heavy"]]
    light = [r["light"] for r in runs]
    rps = [h["ok"] / (h["duration_us"] / 1e6) for h in heavy] if heavy else []
    return {
        "strategy": label,
        "connections": runs[0]["connections"],
        "rounds": len(runs),
        "heavy_rps": statistics.median(rps) if rps else None,
        "heavy_ok": sum(h["ok"] for h in heavy),
        "light_p50_us": statistics.median(l["p50_us"] for l in light),
        "light_p99_us": statistics.median(l["p99_us"] for l in light),
        "light_p999_us": statistics.median(l["p999_us"] for l in light),
        "light_ok": sum(l["ok"] for l in light),
        "light_rps": statistics.median(l["ok"] / (l["duration_us"] / 1e6) for l in light),
        # CPU time per heavy request whose work ran: the work alone (thread CPU time,
        # wherever it ran), and the whole server process's.
        "work_ms": per_request(runs, "work_us"),
        "server_ms": per_request(runs, "process_us"),
        "s503": sum(h["s503"] for h in heavy) + sum(l["s503"] for l in light),
        "failures": sum(h["other_status"] + h["socket_errors"] for h in heavy)
        + sum(l["other_status"] + l["socket_errors"] for l in light),
    }


def heavy_rps(run):
    h = run["heavy"]
    return h["ok"] / (h["duration_us"] / 1e6)


def light_p99(run):
    return run["light"]["p99_us"]


def paired(runs, a, b, value):
    """The ratios a/b of `value`, one per round that measured both: on a machine whose
    speed drifts, two runs of one round are minutes apart at most, so their ratio is
    steadier than the ratio of two medians over the whole run. Returns (median, min, max)."""
    by_round = {r["round"]: r for r in runs.get(b, [])}
    rs = [value(r) / value(by_round[r["round"]]) for r in runs.get(a, [])
          if r["round"] in by_round and value(by_round[r["round"]]) > 0]
    return (statistics.median(rs), min(rs), max(rs)) if rs else None


def ratios(rows, runs):
    """Spindle's strategies against the best non-Spindle one (by its median over the
    rounds), and the targets; each ratio is the median of the per-round ratios."""
    peers = [r for r in rows if r["strategy"] in PEERS and r["heavy_rps"] is not None]
    out = []
    if not peers:
        return out
    best_p99 = min(peers, key=lambda r: r["light_p99_us"])["strategy"]
    best_rps = max(peers, key=lambda r: r["heavy_rps"])["strategy"]
    for s in [r["strategy"] for r in rows if is_spindle(r["strategy"]) and r["heavy_rps"] is not None]:
        p99 = paired(runs, s, best_p99, light_p99)
        rps = paired(runs, s, best_rps, heavy_rps)
        if not p99 or not rps:
            continue
        out.append({"strategy": s, "light_p99_vs": best_p99, "light_p99_ratio": p99[0],
                    "light_p99_range": list(p99[1:]), "heavy_rps_vs": best_rps,
                    "heavy_rps_ratio": rps[0], "heavy_rps_range": list(rps[1:])})
    by = {r["strategy"]: r for r in rows}
    for overload in [r for r in rows if r["strategy"].endswith("-overload")]:
        p99 = paired(runs, overload["strategy"], "unloaded", light_p99)
        if p99:
            out.append({"strategy": overload["strategy"], "light_p99_vs": "unloaded",
                        "light_p99_ratio": p99[0], "light_p99_range": list(p99[1:]),
                        "failures": by[overload["strategy"]]["failures"]})
    return out


def fmt_us(us):
    return f"{us / 1000:.2f}" if us >= 1000 else f"{us / 1000:.3f}"


def ms(x):
    return "-" if x is None else f"{x:.2f}"


def span(r):
    return f"rounds {r[0]:.3g}" if r[0] == r[1] else f"rounds {r[0]:.3g}-{r[1]:.3g}"


def table(rows, rs, args):
    lines = [f"service-bench: {args.cpus} CPUs, {args.rounds} round(s) of {args.seconds} s per strategy",
             f"{'strategy':36} {'conns':>5} {'heavy req/s':>11} {'light req/s':>11} {'p50 ms':>8} {'p99 ms':>8} {'p99.9 ms':>9} {'503s':>6} {'failed':>6} {'CPU ms/req: work':>16} {'server':>6}"]
    for r in rows:
        rps = f"{r['heavy_rps']:.1f}" if r["heavy_rps"] is not None else "-"
        lines.append(f"{r['strategy']:36} {r['connections']:>5} {rps:>11} {r['light_rps']:>11.1f} {fmt_us(r['light_p50_us']):>8} "
                     f"{fmt_us(r['light_p99_us']):>8} {fmt_us(r['light_p999_us']):>9} {r['s503']:>6} {r['failures']:>6} "
                     f"{ms(r['work_ms']):>16} {ms(r['server_ms']):>6}")
    if args.table_only:
        return "\n".join(lines) + "\n"
    lines.append("")
    for x in rs:
        if "heavy_rps_ratio" in x:
            lines.append(f"{x['strategy']}: light p99 {x['light_p99_ratio']:.3g}x {x['light_p99_vs']}'s "
                         f"({span(x['light_p99_range'])}; target <= 0.2), heavy req/s {x['heavy_rps_ratio']:.3g}x "
                         f"{x['heavy_rps_vs']}'s ({span(x['heavy_rps_range'])}; target >= 0.95)")
        else:
            lines.append(f"{x['strategy']}: light p99 {x['light_p99_ratio']:.3g}x its unloaded p99 "
                         f"({span(x['light_p99_range'])}; target <= 2), "
                         f"{x['failures']} accepted requests failed (target 0)")
    return "\n".join(lines) + "\n"


def svg(rows):
    """Two bar charts: light p99 (lower is better) and heavy throughput."""
    data = [r for r in rows if r["strategy"] != "unloaded"]
    w, bar, gap, left = 720, 18, 8, 200
    h = 60 + 2 * (len(data) * (bar + gap) + 40)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">']
    y = 20
    for title, key, unit in (("light endpoint p99 under heavy load (ms, lower is better)", "light_p99_us", 1000),
                             ("heavy endpoint throughput (requests/s)", "heavy_rps", 1)):
        out.append(f'<text x="10" y="{y + 12}" font-weight="bold">{title}</text>')
        y += 24
        vals = [(r["strategy"], (r[key] or 0) / unit) for r in data]
        top = max(v for _, v in vals) or 1
        for name, v in vals:
            colour = "#2a7" if name.startswith("spindle") else "#888"
            length = (w - left - 80) * v / top
            out.append(f'<text x="10" y="{y + bar - 5}">{name}</text>')
            out.append(f'<rect x="{left}" y="{y}" width="{length:.1f}" height="{bar}" fill="{colour}"/>')
            out.append(f'<text x="{left + length + 5:.1f}" y="{y + bar - 5}">{v:.3g}</text>')
            y += bar + gap
        y += 16
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("results")
    p.add_argument("--format", default="table", choices=["table", "json"])
    p.add_argument("--output")
    p.add_argument("--plot")
    p.add_argument("--cpus", type=int, default=0)
    p.add_argument("--seconds", type=int, default=0)
    p.add_argument("--rounds", type=int, default=0)
    p.add_argument("--table-only", action="store_true", help="the table without the ratio lines")
    p.add_argument("--check-work", action="store_true",
                   help="fail unless every strategy served heavy and light requests (a smoke run)")
    args = p.parse_args()
    runs = load(args.results)
    rows = [summarise(label, rs) for label, rs in runs.items()]
    rs = ratios(rows, runs)
    if args.check_work:
        bad = [r["strategy"] for r in rows
               if r["light_ok"] == 0 or (r["strategy"] != "unloaded" and r["heavy_ok"] == 0)
               or ("-limited" not in r["strategy"] and r["failures"] + r["s503"] > 0)
               or r["failures"] > 0]
        if bad:
            print(f"service-bench: no work done, or requests failed, for: {', '.join(bad)}", file=sys.stderr)
            print(json.dumps(rows, indent=1), file=sys.stderr)
            sys.exit(1)
    if args.format == "json":
        text = json.dumps({"schema": 1, "cpus": args.cpus, "seconds": args.seconds, "rounds": args.rounds,
                           "strategies": rows, "ratios": rs}, indent=1) + "\n"
    else:
        text = table(rows, rs, args)
    if args.output:
        open(args.output, "w").write(text)
    else:
        sys.stdout.write(text)
    if args.plot:
        open(args.plot, "w").write(svg(rows))


if __name__ == "__main__":
    main()
