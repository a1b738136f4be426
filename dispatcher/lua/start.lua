-- start(job_id, now, run_lease_s) -> 1 | 0
-- A worker began the job. 0 when the job is unknown (finished already: the
-- worker should skip it) or delayed (never released, so no message for it can
-- exist). A held job is one whose lease expired and that reap put back while
-- its message was still on its way; the worker has it now, so it leaves the
-- backlog and is not released a second time. Such a job is in flight without
-- a release, so it may briefly exceed the window or its key's cap: it is
-- running whatever we count. A held job that was handed back (r: a retry, a
-- stopping worker) is refused: the attempt that let it go is ending.
local id, now, lease_s = ARGV[1], clock(ARGV[2]), tonumber(ARGV[3])
prefetch(true, nil, {record_field(id)})  -- the record and the lane's numbers in one read
local job = load_job(id)
if not job or job.s == 'delayed' or job.r then return 0 end
if job.s == 'held' and not in_flight(id) then
  leave_backlog(job)  -- its entry is stale once the record says running
  set_in_flight(job.k, in_flight_of(job.k) + 1)
  count_flight(1)
  count_cost('fc', job, 1)
end
redis.call('ZADD', INFLIGHT, fmt(now + lease_s), id)
job.s = 'running'
save_job(id, job)
note_progress(ARGV[2])
return 1
