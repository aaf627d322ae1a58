-- wrk script: POST /v1/bloomfilter/<filter>/check-and-set with {"value":"..."}.
--
-- Values never repeat within a run, across threads or across runs (run id + thread id +
-- per-thread counter), so every request inserts a new key and should answer false
-- (true only for a false positive). filter-service's script used one counter shared by
-- name across threads, so its threads sent the same values and mostly measured hits.
--
--   wrk -s bench/check-and-set.lua http://127.0.0.1:8080
--
-- Env: BENCH_FILTER  filter name (default "bench"; bench/run.sh creates it).

local filter = os.getenv("BENCH_FILTER") or "bench"
-- BENCH_QUERY is appended to the path, such as "?consistency=all".
local path = "/v1/bloomfilter/" .. filter .. "/check-and-set" .. (os.getenv("BENCH_QUERY") or "")
local run_id = string.format("%x", os.time())

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
   local value = string.format("cas-%s-%d-%d", run_id, thread_id, counter)
   return wrk.format(nil, path, nil, '{"value":"' .. value .. '"}')
end
