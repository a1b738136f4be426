-- requeue(job_id, actual_cost, due, now, payload, delay, tag) -> 1 | 0
-- A job in flight goes back to the front of its backlog: a worker shutting
-- down handed it back, or a transient error sends it round again after a
-- backoff (`due`, empty for at once). Its key pays for what the attempt
-- used: the estimated charge is replaced by `actual_cost` (0 when it never
-- started, a refund), so the next release charges it once more and a retry
-- neither jumps the queue nor loses its place. A delayed retry keeps its
-- front place: when due it rejoins the head of its backlog, not the tail.
-- A non-empty payload replaces the job's message (a retry may carry new
-- options, e.g. time limits from a better estimate), released first under
-- `tag` when one is given (as submit's). Does not release.
local id, actual, now = ARGV[1], tonumber(ARGV[2]) or 0, clock(ARGV[4])
local due = due_time(ARGV[3], ARGV[6], now)
local payload = ARGV[5]
local job = load_job(id)
if not job or not in_flight(id) then return 0 end
-- The tag of its last release is spent: the next one carries the new
-- message's tag, or the release's own.
job.t = nil
if payload and payload ~= '' then
  jput(payload_field(id), payload)
  job.t = ARGV[7] ~= '' and ARGV[7] or nil
end
adjust_vt(job.k, actual - job.c)
count_served(job, actual, false)
leave_flight(id, job)
if due and due > now then
  job.s = 'delayed'
  job.f = 1
  save_job(id, job)
  redis.call('ZADD', DELAYED, fmt(due), id)
  note_due(due)
else
  -- Handed back, not reaped: a late start() from the attempt that let it go
  -- must not take it out of the backlog again (see start.lua).
  job.r = 1
  put_back(id, job)
end
return 1
