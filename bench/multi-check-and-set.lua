-- wrk script: POST /v1/bloomfilter/<filter>/multi-check-and-set with
-- {"values":["...", ...]}, N new values per request.
--
--   wrk -s bench/multi-check-and-set.lua http://127.0.0.1:8080 -- 100
--   BENCH_BATCH=100 wrk -s bench/multi-check-and-set.lua http://127.0.0.1:8080
--
-- N is the first script argument (after "--"), else BENCH_BATCH, else 10. Values never
-- repeat (run id + thread id + per-thread counter), so every value is an insert.
-- Keys per second = requests per second * N.
--
-- Env: BENCH_FILTER  filter name (default "bench"; bench/run.sh creates it).

local filter = os.getenv("BENCH_FILTER") or "bench"
-- BENCH_QUERY is appended to the path, such as "?consistency=all"; BENCH_OP=multi-set sends the
-- values to multi-set instead.
local path = "/v1/bloomfilter/" .. filter .. "/" .. (os.getenv("BENCH_OP") or "multi-check-and-set") .. (os.getenv("BENCH_QUERY") or "")
local run_id = string.format("%x", os.time())

local next_thread_id = 1
function setup(thread)
   thread:set("thread_id", next_thread_id)
   next_thread_id = next_thread_id + 1
end

local batch = 10
local counter = 0

function init(args)
   local n = tonumber(args[1] or os.getenv("BENCH_BATCH") or "10")
   if n == nil or n < 1 or n ~= math.floor(n) then
      error("batch size must be a positive integer, got " .. tostring(args[1] or os.getenv("BENCH_BATCH")))
   end
   batch = n
   wrk.method = "POST"
   wrk.headers["Content-Type"] = "application/json"
end

function request()
   local values = {}
   for i = 1, batch do
      counter = counter + 1
      values[i] = string.format('"mcas-%s-%d-%d"', run_id, thread_id, counter)
   end
   return wrk.format(nil, path, nil, '{"values":[' .. table.concat(values, ",") .. "]}")
end
