-- cancel(job_id...) -> {1 | 0, ...}, one per id, in order
-- Only a waiting (held or delayed) job: a released one has a message in the
-- Celery queue already; its worker finds it cancelled in the database and
-- calls finish. Many ids in one call share its reads and its one write of H
-- (`flush`): the records in one HMGET, each key's and its group's fields
-- once, however many of its jobs go.
local records = {}
for i, id in ipairs(ARGV) do records[i] = record_field(id) end
prefetch(true, nil, records)
local done = {}
for i, id in ipairs(ARGV) do
  local job = load_job(id)
  if not job or (job.s ~= 'held' and job.s ~= 'delayed') or in_flight(id) then
    done[i] = 0
  else
    -- The key's fields and its group's (a guess, right for a key of its own group) in one read.
    prefetch(true, {job.k, solo(job.k)})
    drop_waiting(id, job)
    forget_job(id)
    done[i] = 1
  end
end
return done
