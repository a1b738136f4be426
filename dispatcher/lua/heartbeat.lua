-- heartbeat(now, run_lease_s, job_id...) -> number of leases renewed
-- Only running jobs: a released job's lease covers its wait in the Celery
-- queue, and a job that was reaped meanwhile must go through start again.
local now, lease_s = clock(ARGV[1]), tonumber(ARGV[2])
local fields = {}
for i = 3, #ARGV do fields[#fields + 1] = record_field(ARGV[i]) end
prefetch(true, nil, fields)  -- every record and the lane's numbers in one read
local renewed = 0
for i = 3, #ARGV do
  local job = load_job(ARGV[i])
  if job and job.s == 'running' then
    redis.call('ZADD', INFLIGHT, fmt(now + lease_s), ARGV[i])
    renewed = renewed + 1
  end
end
if renewed > 0 then note_progress(ARGV[1]) end
return renewed
