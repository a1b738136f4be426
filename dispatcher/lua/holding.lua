-- holding(token, ttl_s, now, margin_s, every_s, job_id...) -> {job_id put back, ...}
-- A worker process (`token`, its instance: pid@host/start, worker.py) says
-- which of the lane's jobs it holds now: taken from the queue, waiting for
-- a pool slot or running. The report stands for ttl_s (Redis's clock) and
-- is renewed with each call; every process that consumes the lane reports
-- before it takes its first message and then every third of ttl_s. Then,
-- at most once per every_s for the whole lane, released jobs whose message
-- is lost are put back (`recover_orphans`, margin_s between two looks).
-- Reports are by process, not by worker name: two processes started with
-- one name (a clash) both take messages.
local token, ttl_s, margin_s, every_s = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[4]), tonumber(ARGV[5])
local now = clock(ARGV[3])
local ids = {}
for i = 6, #ARGV do ids[#ids + 1] = ARGV[i] end
-- The time as a string: cjson would round a number to 14 digits.
redis.call('HSET', HOLDS, token, cjson.encode({at = fmt(now), ids = ids}))
local checked = P .. 'orphans_checked'
if every_s > 0 then
  local last = tonumber(redis.call('GET', checked))
  if last and now >= last and now - last < every_s then return {} end
end
redis.call('SET', checked, fmt(now))
return recover_orphans(now, ttl_s, margin_s)
