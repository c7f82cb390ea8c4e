#!/usr/bin/env bash
# The service benchmark: a Hummingbird server (Benchmarks/Service) whose heavy endpoint
# decodes, transforms and encodes a ~100 KB JSON document, run with each way of
# offloading that work in turn, under load from wrk. While wrk saturates the heavy
# endpoint, a second wrk measures the light endpoint's latency. Prints heavy requests/s,
# light p50/p99/p99.9, errors and 503s per strategy, and the ratios against the best
# strategy that is not Spindle's.
#
# The heavy load runs at nice 19 and the light probe waits 1 ms between a response and
# its next request. On a machine that also runs the server, a load generator at the
# server's priority takes CPU from it, and a probe that sends its next request the
# moment a response arrives is a second load; a client on another machine is neither.
# Spindle's strategies run at --qos (utility by default); a strategy name ending in
# -background (spindle-background, spindle-limited-background) runs the same at
# background.
#
#   scripts/service-bench.sh                 # every strategy, 3 rounds of 10 s
#   scripts/service-bench.sh --smoke         # 2 s each, one round: checks the work is done
#   options: --seconds N  --rounds N  --connections N (heavy; default 4 per CPU)
#            --strategies a,b  --qos default|utility|background (Spindle's class)
#            --client-nice N: the heavy load generator's nice (default 19; 0: the
#            server's own priority)
#            --probe-pace MS: the light probe's wait between requests (default 1;
#            0: none, a closed loop)
#            --format table|json  --output FILE  --plot FILE.svg
#            --update-docs: also write the table into README.md and docs/performance.md
#            (between their service:begin and service:end markers) and the plot into
#            docs/service.svg
#
# Talks only to 127.0.0.1, bounds every run in time, and leaves no process behind.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
spindle_ensure_deps wrk

seconds=10 rounds=3 connections="" format=table output="" plot="" smoke=0 qos=utility update_docs=0 client_nice=19 probe_pace=1
strategies="inline,detached,nio,spindle,spindle-background,spindle-queue,spindle-limited,spindle-limited-background"
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --connections) connections="$2"; shift 2 ;;
    --strategies) strategies="$2"; shift 2 ;;
    --qos) qos="$2"; shift 2 ;;
    --client-nice) client_nice="$2"; shift 2 ;;
    --probe-pace) probe_pace="$2"; shift 2 ;;
    --format) format="$2"; shift 2 ;;
    --output) output="$2"; shift 2 ;;
    --plot) plot="$2"; shift 2 ;;
    --smoke) smoke=1; seconds=2; rounds=1; shift ;;
    --update-docs) update_docs=1; shift ;;
    *) echo "service-bench: unknown option $1" >&2; exit 2 ;;
  esac
done
cpus=$(nproc)
connections=${connections:-$((4 * cpus))}

echo "service-bench: building Benchmarks/Service (release)" >&2
swift build -c release --package-path Benchmarks/Service >&2
bin="$(swift build -c release --package-path Benchmarks/Service --show-bin-path)/ServiceBench"

work="$(mktemp -d)"
server_pid=""
cleanup() {
  [ -n "$server_pid" ] && kill -KILL "$server_pid" 2>/dev/null || true
  jobs -p | xargs -r kill -KILL 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT INT TERM
"$bin" --write-body "$work/body.json"
export SERVICE_BENCH_BODY="$work/body.json"

# Starts the server with the given options (--qos among them); sets server_pid and port.
start_server() {
  "$bin" --max-seconds $((seconds * 3 + 60)) "$@" > "$work/server.out" 2> "$work/server.err" &
  server_pid=$!
  port=""
  for _ in $(seq 1 300); do
    port=$(sed -n 's/^PORT //p' "$work/server.out" | head -1)
    [ -n "$port" ] && return 0
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "service-bench: the server did not start: $(cat "$work/server.err")" >&2
  exit 1
}

stop_server() {
  kill -TERM "$server_pid" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  server_pid=""
}

# One measurement: heavy load with $2 connections (0: none) and the light probe.
measure() {
  local label="$1" conns="$2"; shift 2
  start_server "$@"
  local heavy_pid=""
  if [ "$conns" -gt 0 ]; then
    SERVICE_BENCH_POST=1 nice -n "$client_nice" wrk -t1 -c"$conns" -d"${seconds}s" --timeout 10s -s Benchmarks/Service/wrk/count.lua \
      "http://127.0.0.1:$port/heavy" > "$work/heavy.out" 2>&1 &
    heavy_pid=$!
    sleep 0.5 # the heavy load first, so that the probe sees it throughout
  fi
  pace=""; [ "$probe_pace" != 0 ] && pace="$probe_pace"
  SERVICE_BENCH_PACE_MS="$pace" wrk -t1 -c1 -d"${seconds}s" --timeout 10s -s Benchmarks/Service/wrk/count.lua \
    "http://127.0.0.1:$port/light" > "$work/light.out" 2>&1
  [ -n "$heavy_pid" ] && wait "$heavy_pid"
  stop_server
  local heavy_json="null"
  [ "$conns" -gt 0 ] && heavy_json=$(grep '^{' "$work/heavy.out" | tail -1)
  printf '{"label":"%s","connections":%d,"heavy":%s,"light":%s}\n' \
    "$label" "$conns" "${heavy_json:-null}" "$(grep '^{' "$work/light.out" | tail -1)" >> "$work/results.jsonl"
  echo "service-bench: $label done" >&2
}

IFS=, read -r -a list <<< "$strategies"
for round in $(seq 1 "$rounds"); do
  # Alternate the order round by round, so that drift spreads over every strategy.
  if [ $((round % 2)) -eq 0 ]; then
    reversed=(); for ((i=${#list[@]}-1; i>=0; i--)); do reversed+=("${list[i]}"); done; order=("${reversed[@]}")
  else
    order=("${list[@]}")
  fi
  measure unloaded 0 --strategy spindle --qos "$qos"
  for s in "${order[@]}"; do
    case "$s" in
      *-background) measure "$s" "$connections" --strategy "${s%-background}" --qos background ;;
      *) measure "$s" "$connections" --strategy "$s" --qos "$qos" ;;
    esac
  done
  # Admission control at twice the connections, for each limited strategy in the list.
  case ",$strategies," in
    *,spindle-limited,*) measure spindle-limited-overload $((2 * connections)) --strategy spindle-limited --qos "$qos" ;;
  esac
  case ",$strategies," in
    *,spindle-limited-background,*)
      measure spindle-limited-background-overload $((2 * connections)) --strategy spindle-limited --qos background ;;
  esac
done

python3 Benchmarks/Service/report.py "$work/results.jsonl" --format "$format" --cpus "$cpus" \
  --seconds "$seconds" --rounds "$rounds" ${output:+--output "$output"} ${plot:+--plot "$plot"} \
  $([ "$smoke" -eq 1 ] && echo --check-work)

if [ "$update_docs" -eq 1 ]; then
  # The README gets the table; docs/performance.md the table and the ratios.
  for part in short full; do
    python3 Benchmarks/Service/report.py "$work/results.jsonl" --format table --cpus "$cpus" \
      --seconds "$seconds" --rounds "$rounds" --output "$work/table-$part.txt" \
      $([ "$part" = short ] && echo --table-only) --plot docs/service.svg
    { echo "\`scripts/service-bench.sh --update-docs\` on $(date +%F): Spindle at $qos (spindle-background: at background), heavy load at nice $client_nice, light probe paced at ${probe_pace} ms:"; echo
      echo '```'; cat "$work/table-$part.txt"; echo '```'; } > "$work/service-$part.md"
  done
  scripts/splice.py service README.md "$work/service-short.md"
  scripts/splice.py service docs/performance.md "$work/service-full.md"
  echo "updated README.md, docs/performance.md and docs/service.svg" >&2
fi

