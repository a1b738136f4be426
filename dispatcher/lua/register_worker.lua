-- register_worker(name, slots, expires_at, now)
-- Also drops workers whose registration expired, so `slots` stays as small as
-- the set of live workers.
local name, slots, expires_at, now = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local dead = redis.call('ZRANGEBYSCORE', WORKERS, '-inf', now)
if #dead > 0 then
  redis.call('ZREM', WORKERS, unpack(dead))
  redis.call('HDEL', SLOTS, unpack(dead))
end
redis.call('ZADD', WORKERS, expires_at, name)
redis.call('HSET', SLOTS, name, slots)
return 1
