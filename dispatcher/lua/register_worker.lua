-- register_worker(name, slots, ttl_s, now)
-- Counts the worker's slots until now + ttl_s (Redis's clock: a worker whose
-- own clock runs ahead must not outlive its registration, nor one behind
-- drop out early). Also drops workers whose registration expired, so `slots`
-- stays as small as the set of live workers.
local name, slots = ARGV[1], ARGV[2]
local now = clock(ARGV[4])
local expires_at = now + tonumber(ARGV[3])
local dead = redis.call('ZRANGEBYSCORE', WORKERS, '-inf', fmt(now))
if #dead > 0 then
  redis.call('ZREM', WORKERS, unpack(dead))
  redis.call('HDEL', SLOTS, unpack(dead))
end
redis.call('ZADD', WORKERS, fmt(expires_at), name)
redis.call('HSET', SLOTS, name, slots)
return 1
