-- cancel(job_id) -> 1 | 0
-- Only a waiting (held or delayed) job: a released one has a message in the
-- Celery queue already; its worker finds it cancelled in the database and
-- calls finish.
local id = ARGV[1]
local job = load_job(id)
if not job or (job.s ~= 'held' and job.s ~= 'delayed') or in_flight(id) then return 0 end
-- The lane's numbers, the key's fields and its group's (a guess, right for
-- a key of its own group) in one read.
prefetch(true, {job.k, solo(job.k)})
drop_waiting(id, job)
forget_job(id)
return 1
