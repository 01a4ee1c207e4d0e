-- wrk: one `tools/call` per request, the same body on every connection.
-- Run with as many threads as connections (`-t C -c C`): each thread is one
-- client, and carries the session its product issued to it, if any.
-- Every answer is checked (status 200, the echoed text in it, no error);
-- `done` prints one line, `RESULT {...}`, for the driver to read.
--
-- Environment: BODY (the request), TARGET_PATH, EXPECT (text every answer
-- holds), HEADERS (`Name: value` lines), SESSIONS (comma-separated, one per
-- thread; empty for a product without sessions).

local threads = {}
local sessions = {}
for s in string.gmatch(os.getenv("SESSIONS") or "", "[^,]+") do
  table.insert(sessions, s)
end
local made = 0

function setup(thread)
  made = made + 1
  thread:set("session", sessions[made] or "")
  table.insert(threads, thread)
end

function init(args)
  ok, bad = 0, 0
  local headers = {}
  headers["Content-Type"] = "application/json"
  headers["Accept"] = "application/json, text/event-stream"
  for name, value in string.gmatch(os.getenv("HEADERS") or "", "([^:\n]+):%s*([^\n]*)") do
    headers[name] = value
  end
  if session ~= "" then
    headers["Mcp-Session-Id"] = session
  end
  req = wrk.format("POST", os.getenv("TARGET_PATH"), headers, os.getenv("BODY"))
  expected = os.getenv("EXPECT")
end

function request()
  return req
end

function response(status, headers, body)
  if status == 200
      and body:find(expected, 1, true)
      and not body:find('"isError":true', 1, true)
      and not body:find('"error":', 1, true) then
    ok = ok + 1
  else
    bad = bad + 1
    if bad <= 3 then
      io.stderr:write("unexpected answer: " .. status .. " " .. body:sub(1, 300) .. "\n")
    end
  end
end

function done(summary, latency, requests)
  local good, wrong = 0, 0
  for _, t in ipairs(threads) do
    good = good + t:get("ok")
    wrong = wrong + t:get("bad")
  end
  local e = summary.errors
  io.write(string.format(
    'RESULT {"ok":%d,"bad":%d,"requests":%d,"duration_us":%d,"errors":%d,"p50":%d,"p90":%d,"p99":%d}\n',
    good, wrong, summary.requests, summary.duration,
    e.connect + e.read + e.write + e.status + e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99)))
end
