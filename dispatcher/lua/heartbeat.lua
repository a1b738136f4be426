-- heartbeat(now, run_lease_s, job_id...) -> number of leases renewed
-- Only running jobs: a released job's lease covers its wait in the Celery
-- queue, and a job that was reaped meanwhile must go through start again.
local now, lease_s = clock(ARGV[1]), tonumber(ARGV[2])
local renewed = 0
for i = 3, #ARGV do
  local job = load_job(ARGV[i])
  if job and job.s == 'running' then
    redis.call('ZADD', INFLIGHT, fmt(now + lease_s), ARGV[i])
    renewed = renewed + 1
  end
end
return renewed
