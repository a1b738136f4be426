-- submit(job_id, key, cost, payload, weight, cap, rate, due, now, delay) -> 1 | 0
-- Empty weight/cap/rate/due mean "leave as is" / "not delayed"; `delay`
-- (seconds) instead of `due` delays from Redis's clock; cap "0" and
-- rate "0" remove the key's cap / rate limit. Returns 0 and
-- changes nothing when the job id is known in any state: duplicate or
-- concurrent submitters cannot put one job in twice, which is what makes
-- release exactly-once. Does not release: the caller calls release next.
local id, k, cost, payload = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local new_weight, new_cap, new_rate = ARGV[5], ARGV[6], ARGV[7]
local now = clock(ARGV[9])
local due = due_time(ARGV[8], ARGV[10], now)

if redis.call('HEXISTS', JOBS, id) == 1 then return 0 end

if new_weight ~= '' then redis.call('HSET', WEIGHT, k, new_weight) end
if new_cap == '0' then
  redis.call('HDEL', CAP, k)
elseif new_cap ~= '' then
  redis.call('HSET', CAP, k, new_cap)
end
if new_rate == '0' then
  redis.call('HDEL', RATE, k)
  redis.call('HDEL', BUCKET, k)
elseif new_rate ~= '' then
  redis.call('HSET', RATE, k, new_rate)
end

-- New limits apply at once: a key parked for its old cap or rate becomes
-- eligible again, and the next release re-checks it against the new ones.
if new_cap ~= '' or new_rate ~= '' then
  local parked = redis.call('SREM', CAPPED, k) + redis.call('ZREM', THROTTLED, k)
  if parked > 0 then activate(k) end
end

redis.call('HSET', PAYLOAD, id, payload)
if due and due > now then
  redis.call('ZADD', DELAYED, fmt(due), id)
  save_job(id, {k = k, c = cost, s = 'delayed'})
else
  redis.call('RPUSH', backlog(k), id)
  save_job(id, {k = k, c = cost, s = 'held'})
  activate(k)
end
return 1
