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

-- With SERVICE_BENCH_PACE_MS set (the light probe), each connection waits that long
-- between a response and its next request: a probe of the endpoint's latency, not a
-- second load that takes CPU from the server.
local pace = tonumber(os.getenv("SERVICE_BENCH_PACE_MS") or "")
if pace then function delay() return pace end end

function setup(thread) table.insert(threads, thread) end

function response(status, headers, body)
  if status == 200 then cok = cok + 1 elseif status == 503 then c503 = c503 + 1 else cother = cother + 1 end
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
