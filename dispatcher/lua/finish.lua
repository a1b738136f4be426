-- finish(job_id, actual_cost, now, release_lease_s, default_window, headroom, key, group) -> {id, payload, ...}
-- The job is done: forget it wherever it is, correct its key's and group's
-- virtual times by (actual - estimated) / weight when it was in flight and a
-- measured cost is given, then release into the freed slot in the same call (the hot path:
-- one round trip per completed job). A held job here is one reaped while it
-- was still running; it is done, so it must not run again. `key`, the job's
-- fairness key if the caller knows it (the worker has it from the message's
-- headers), lets the job's record, its key's fields and the lane's numbers
-- be read in one command, and `group`, its group's name in the lane's
-- tables ('@g:<name>' or '@k:<key>') likewise; only hints: the record's key
-- and the key's group are the ones used.
local id, actual = ARGV[1], tonumber(ARGV[2])
local lease_s, default_window, headroom = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local hint = ARGV[7] ~= '' and ARGV[7] or nil
local group_hint = ARGV[8] and ARGV[8] ~= '' and ARGV[8] or (hint and solo(hint))
prefetch(true, {hint, group_hint}, {record_field(id)})
local job = load_job(id)
local ran = false
if job then
  -- Without a hint, or a wrong one: the key and (a guess, right for a key
  -- of its own group) its group in one more read.
  prefetch(false, {job.k, ARGV[8] and ARGV[8] ~= '' and ARGV[8] or solo(job.k)})
  if redis.call('ZREM', INFLIGHT, id) == 1 then  -- released or running
    ran = true
    if actual then adjust_vt(job.k, actual - job.c) end
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
