-- Counts responses by status and prints one JSON line when done. With
-- SERVICE_BENCH_POST set (the heavy endpoint's load), every request POSTs the catalog
-- in the file SERVICE_BENCH_BODY names; without it (the light probe), a plain GET.
local threads = {}
cok, c503, cother = 0, 0, 0

if os.getenv("SERVICE_BENCH_POST") then
  local f = assert(io.open(os.getenv("SERVICE_BENCH_BODY"), "rb"))
  wrk.method = "POST"
  wrk.body = f:read("*a")
  f:close()
  wrk.headers["Content-Type"] = "application/json"
end

-- With SERVICE_BENCH_RATE set (the light probe), each connection sends that many
-- requests per second on a fixed schedule, whatever the latency: the same light load for
-- every strategy, so that a strategy that answers faster is not also sent more work.
-- A request that falls behind the schedule goes at once, and the schedule is kept.
-- wrk's delay() takes whole milliseconds; the schedule is absolute, so the rounding
-- does not accumulate.
local rate = tonumber(os.getenv("SERVICE_BENCH_RATE") or "")
if rate and rate > 0 then
  local ffi = require("ffi")
  ffi.cdef[[
    typedef struct { long tv_sec; long tv_nsec; } service_bench_timespec;
    int clock_gettime(int clock, service_bench_timespec *ts);
  ]]
  local ts = ffi.new("service_bench_timespec")
  local function now_ms()
    ffi.C.clock_gettime(1, ts) -- CLOCK_MONOTONIC
    return tonumber(ts.tv_sec) * 1000 + tonumber(ts.tv_nsec) / 1e6
  end
  local interval, due = 1000 / rate, nil
  function delay()
    local now = now_ms()
    due = due or now
    local wait = due - now
    due = due + interval
    if wait <= 0 then return 0 end
    return math.floor(wait + 0.5)
  end
end

-- With SERVICE_BENCH_BACKOFF_MS set (the heavy load), a connection that was refused
-- (503) waits that long before its next request, as a client with a retry policy does;
-- without it, a refused request is sent again at once. The flag is per thread, so this
-- needs one connection per thread: the script runs wrk with -t equal to -c.
local backoff = tonumber(os.getenv("SERVICE_BENCH_BACKOFF_MS") or "")
local refused = false
if not (rate and rate > 0) and backoff and backoff > 0 then
  function delay()
    if refused then refused = false; return backoff end
    return 0
  end
end

function setup(thread) table.insert(threads, thread) end

function response(status, headers, body)
  if status == 200 then cok = cok + 1 elseif status == 503 then c503 = c503 + 1; refused = true else cother = cother + 1 end
end

function done(summary, latency, requests)
  local ok, s503, other = 0, 0, 0
  for _, t in ipairs(threads) do
    ok = ok + t:get("cok"); s503 = s503 + t:get("c503"); other = other + t:get("cother")
  end
  local e = summary.errors
  io.write(string.format(
    '{"duration_us":%d,"requests":%d,"ok":%d,"s503":%d,"other_status":%d,"socket_errors":%d,"p50_us":%d,"p99_us":%d,"p999_us":%d}\n',
    summary.duration, summary.requests, ok, s503, other, e.connect + e.read + e.write + e.timeout,
    latency:percentile(50), latency:percentile(99), latency:percentile(99.9)))
end
