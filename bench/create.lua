-- wrk script: PUT /v1/bloomfilter/<unique name> creating a small filter that expires
-- 5 seconds after creation, so a long run does not accumulate filters without bound
-- (the server purges expired filters in the background).
--
--   wrk -s bench/create.lua http://127.0.0.1:8080
--
-- Names are unique per run, thread and request, so every request creates (201).

local run_id = string.format("%x", os.time())
local body = '{"expectedInsertions":1000,"fpp":0.01,"validPeriodAfterCreate":5}'

local next_thread_id = 1
function setup(thread)
   thread:set("thread_id", next_thread_id)
   next_thread_id = next_thread_id + 1
end

local counter = 0

function init(args)
   wrk.method = "PUT"
   wrk.headers["Content-Type"] = "application/json"
end

function request()
   counter = counter + 1
   local name = string.format("create-%s-%d-%d", run_id, thread_id, counter)
   return wrk.format(nil, "/v1/bloomfilter/" .. name, nil, body)
end
