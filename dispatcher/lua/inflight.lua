-- inflight(now, ttl_s) -> JSON [{id, key, state, lease_s, queued, holder, missing_s}, ...]
-- For the staff page, not the hot path: O(window + queue + workers). Every
-- job in flight, latest lease first: released (its message in the queue or
-- taken by a worker) or running; seconds until its lease runs out; whether
-- its message waits in the queue; which worker process says it holds it;
-- and for how long it has been found in neither (`recover_orphans`), so an
-- operator can tell a stale entry from one on its way.
local now, ttl_s = clock(ARGV[1]), tonumber(ARGV[2])
local holder = live_holdings(now, ttl_s)
local queued, marks = queued_jobs(), missing_since()
local out = {}
local ids = jobs_in_flight()
for i = 1, #ids, 2 do
  local id, deadline = ids[i], ids[i + 1]
  local job = load_job(id)
  if job then
    local since = mark_time(marks[id], deadline)
    out[#out + 1] = {
      id = id, key = job.k, state = job.s == 'running' and 'running' or 'released',
      lease_s = tonumber(deadline) - now, queued = queued[id] == true, holder = holder[id] or '',
      missing_s = since and (now - since) or -1,
    }
  end
end
if #out == 0 then return '[]' end
return cjson.encode(out)
