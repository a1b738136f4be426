-- finish(job_id, actual_cost, now, release_lease_s, default_window, headroom, key) -> {id, payload, ...}
-- The job is done: forget it wherever it is, correct its key's virtual time by
-- (actual - estimated) / weight when it was in flight and a measured cost is
-- given, then release into the freed slot in the same call (the hot path:
-- one round trip per completed job). A held job here is one reaped while it
-- was still running; it is done, so it must not run again. `key`, the job's
-- fairness key if the caller knows it (the worker has it from the message's
-- headers), lets the job's record, its key's fields and the lane's numbers
-- be read in one command; only a hint: the record's key is the one used.
local id, actual = ARGV[1], tonumber(ARGV[2])
local lease_s, default_window, headroom = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local hint = ARGV[7] ~= '' and ARGV[7] or nil
prefetch(true, hint, {record_field(id)})
local job = load_job(id)
local ran = false
if job then
  if redis.call('ZREM', INFLIGHT, id) == 1 then  -- released or running
    ran = true
    if actual then adjust_vt(job.k, (actual - job.c) / weight(job.k)) end
    count_served(job, actual, true)
    left_flight(job)
  else
    drop_waiting(id, job)
  end
  forget_job(id)
end
local released = release(ARGV[3], lease_s, default_window, headroom, 0)
if ran then note_progress(ARGV[3]) end
return released
