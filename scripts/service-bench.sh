#!/usr/bin/env bash
# The service benchmark: a Hummingbird server (Benchmarks/Service) whose heavy endpoint
# decodes, transforms and encodes a ~100 KB JSON document, run with each way of
# offloading that work in turn, under load from wrk. While wrk saturates the heavy
# endpoint, a second wrk measures the light endpoint's latency. Prints heavy requests/s,
# light p50/p99/p99.9, errors and 503s, and the server's CPU time per heavy request per
# strategy, and the ratios against the best strategy that is not Spindle's.
#
# Both load generators run at SCHED_FIFO priority 1, and the light probe sends 200
# requests per second on a fixed schedule. A client on another machine never waits for
# the server's threads to give up a CPU, and sends the same light load however fast the
# server answers. On a machine that also runs the server, a client at an ordinary
# priority competes with the server's threads, so each strategy's thread priorities
# would decide how fast its own load arrives; and a probe that sends its next request
# the moment a response arrives is a second load, one that grows as the server answers
# faster.
#
# Spindle's strategies run at --qos (utility by default); a strategy name ending in
# -background (spindle-background, spindle-executor-background,
# spindle-limited-background) runs the same at background.
#
#   scripts/service-bench.sh                 # every strategy, 5 rounds of 8 s
#   scripts/service-bench.sh --smoke         # 2 s each, one round: checks the work is done
#   options: --seconds N  --rounds N  --connections N (heavy; default 4 per CPU)
#            --strategies a,b  --qos default|utility|background (Spindle's class)
#            --client rt|nice: the load generators at SCHED_FIFO 1 (rt, the default;
#            needs CAP_SYS_NICE, else nice is used) or at an ordinary priority (nice)
#            --client-nice N: with --client nice, the heavy load generator's nice
#            (default 19; 0: the server's own priority)
#            --backoff MS: how long a heavy connection waits after a 503 before its next
#            request (default 10, as a client with a retry policy; 0: at once)
#            --probe-rate N: the light probe's requests per second, on a fixed schedule
#            (default 200; 0: a closed loop, each request sent as the last one returns)
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

seconds=8 rounds=5 connections="" format=table output="" plot="" smoke=0 qos=utility update_docs=0 client=rt client_nice=19 probe_rate=200 backoff=10
strategies="inline,detached,nio,spindle,spindle-background,spindle-executor,spindle-executor-background,spindle-queue,spindle-limited,spindle-limited-background"
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --connections) connections="$2"; shift 2 ;;
    --strategies) strategies="$2"; shift 2 ;;
    --qos) qos="$2"; shift 2 ;;
    --client) client="$2"; shift 2 ;;
    --client-nice) client_nice="$2"; shift 2 ;;
    --probe-rate) probe_rate="$2"; shift 2 ;;
    --backoff) backoff="$2"; shift 2 ;;
    --format) format="$2"; shift 2 ;;
    --output) output="$2"; shift 2 ;;
    --plot) plot="$2"; shift 2 ;;
    --smoke) smoke=1; seconds=2; rounds=1; shift ;;
    --update-docs) update_docs=1; shift ;;
    *) echo "service-bench: unknown option $1" >&2; exit 2 ;;
  esac
done
cpus=$(nproc)
case "$client" in
  rt|nice) ;;
  *) echo "service-bench: --client must be rt or nice, got $client" >&2; exit 2 ;;
esac
if [ "$client" = rt ] && ! chrt -f 1 true 2>/dev/null; then
  echo "service-bench: SCHED_FIFO is not permitted here (needs CAP_SYS_NICE); the clients run at nice $client_nice and 0" >&2
  client=nice
fi
if [ "$client" = rt ]; then
  heavy_client="chrt -f 1" probe_client="chrt -f 1" client_words="load generators at SCHED_FIFO 1"
else
  heavy_client="nice -n $client_nice" probe_client="" client_words="heavy load at nice $client_nice"
fi
connections=${connections:-$((4 * cpus))}

echo "service-bench: building Benchmarks/Service (release)" >&2
swift build -c release --package-path Benchmarks/Service --product ServiceBench >&2
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
    port=$(sed -n 's/^PORT //p;T;q' "$work/server.out")
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
    # A thread per connection: the backoff is kept per thread (wrk/count.lua).
    SERVICE_BENCH_POST=1 SERVICE_BENCH_BACKOFF_MS="$backoff" $heavy_client wrk -t"$conns" -c"$conns" -d"${seconds}s" --timeout 10s -s Benchmarks/Service/wrk/count.lua \
      "http://127.0.0.1:$port/heavy" > "$work/heavy.out" 2>&1 &
    heavy_pid=$!
    sleep 0.5 # the heavy load first, so that the probe sees it throughout
  fi
  SERVICE_BENCH_RATE="$probe_rate" $probe_client wrk -t1 -c1 -d"${seconds}s" --timeout 10s -s Benchmarks/Service/wrk/count.lua \
    "http://127.0.0.1:$port/light" > "$work/light.out" 2>&1
  [ -n "$heavy_pid" ] && wait "$heavy_pid"
  stop_server
  local heavy_json="null"
  [ "$conns" -gt 0 ] && heavy_json=$(grep '^{' "$work/heavy.out" | tail -1)
  local cpu_json
  cpu_json=$(sed -n 's/^CPU //p' "$work/server.out" | tail -1)
  printf '{"label":"%s","round":%d,"connections":%d,"heavy":%s,"light":%s,"server_cpu":%s}\n' \
    "$label" "$round" "$conns" "${heavy_json:-null}" "$(grep '^{' "$work/light.out" | tail -1)" \
    "${cpu_json:-null}" >> "$work/results.jsonl"
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
    { echo "\`scripts/service-bench.sh --update-docs\` on $(date +%F): Spindle at $qos (spindle-background: at background), $client_words, light probe at $probe_rate requests/s, $backoff ms back-off after a 503:"; echo
      echo '```'; cat "$work/table-$part.txt"; echo '```'; } > "$work/service-$part.md"
  done
  scripts/splice.py service README.md "$work/service-short.md"
  scripts/splice.py service docs/performance.md "$work/service-full.md"
  echo "updated README.md, docs/performance.md and docs/service.svg" >&2
fi

