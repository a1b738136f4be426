-- reap(now) -> {job_id, ...}
-- Jobs whose lease deadline has passed (publisher died before publishing, or
-- worker died mid-run) go back to the front of their backlog, still charged:
-- a job that kills workers should not get cheaper for it. Latest deadline
-- first, so that jobs of one key keep their order after the LPUSHes.
local now = clock(ARGV[1])
local expired = redis.call('ZREVRANGEBYSCORE', INFLIGHT, fmt(now), '-inf', 'LIMIT', 0, BATCH)
for _, id in ipairs(expired) do
  local job = load_job(id)
  leave_flight(id, job)
  job.t = nil  -- its last release's tag is spent: the next release uses its own
  put_back(id, job)
end
return expired
