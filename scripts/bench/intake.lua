-- wrk script: POST /v1/jobs with a unique external_id per request, spread round-robin
-- over USERS distinct users (the script's first argument after `--`, default 1,000).
-- Counts 2xx and non-2xx so the report can compare with the stored rows.
local counter = 0
local thread_id = 0
local threads = {}

function setup(thread)
  thread:set("id", thread_id)
  thread_id = thread_id + 1
  table.insert(threads, thread)
end

function init(args)
  ok = 0
  bad = 0
  users = tonumber(args[1]) or 1000
end

function request()
  counter = counter + 1
  local user = "u" .. (counter % users)
  local body = string.format(
    '{"user":"%s","entrypoint":"sleep 1","resources":{"cpu":1},"external_id":"w%d-%d"}',
    user, id, counter)
  return wrk.format("POST", "/v1/jobs", {["Content-Type"] = "application/json"}, body)
end

function response(status, headers, body)
  if status >= 200 and status < 300 then ok = ok + 1 else bad = bad + 1 end
end

function done(summary, latency, requests)
  local total_ok, total_bad = 0, 0
  for _, t in ipairs(threads) do
    total_ok = total_ok + t:get("ok")
    total_bad = total_bad + t:get("bad")
  end
  io.write(string.format("RESULT ok=%d bad=%d seconds=%.3f p50_ms=%.2f p99_ms=%.2f\n",
    total_ok, total_bad, summary.duration / 1e6,
    latency:percentile(50) / 1000, latency:percentile(99) / 1000))
end
