-- requeue(job_id) -> 1 | 0
-- A job in flight goes back to the front of its backlog (a worker shutting
-- down, a retry). Its charge is refunded, so the next release charges it once
-- more and it costs its key one job in total. Does not release: the caller
-- decides when (a retry may want to wait).
local id = ARGV[1]
local job = load_job(id)
if not job or (job.s ~= 'released' and job.s ~= 'running') then return 0 end
adjust_vt(job.k, -job.c / weight(job.k))
leave_flight(id, job)
put_back(id, job)
return 1
