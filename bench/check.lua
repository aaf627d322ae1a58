-- wrk script: POST /v1/bloomfilter/<filter>/check with {"value":"..."}.
--
-- Every request checks a different value, so the server cannot answer from a cache and
-- the test measures lookups of absent keys (the common case for a dedup filter).
--
--   wrk -s bench/check.lua http://127.0.0.1:8080
--
-- Env: BENCH_FILTER  filter name (default "bench"; bench/run.sh creates it).

local filter = os.getenv("BENCH_FILTER") or "bench"
-- BENCH_QUERY is appended to the path, such as "?consistency=quorum".
local path = "/v1/bloomfilter/" .. filter .. "/check" .. (os.getenv("BENCH_QUERY") or "")
local run_id = string.format("%x", os.time())

-- setup runs once per thread in the main Lua state; thread:set hands each thread its id.
local next_thread_id = 1
function setup(thread)
   thread:set("thread_id", next_thread_id)
   next_thread_id = next_thread_id + 1
end

local counter = 0

function init(args)
   wrk.method = "POST"
   wrk.headers["Content-Type"] = "application/json"
end

function request()
   counter = counter + 1
   local value = string.format("check-%s-%d-%d", run_id, thread_id, counter)
   return wrk.format(nil, path, nil, '{"value":"' .. value .. '"}')
end
