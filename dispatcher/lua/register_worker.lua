-- register_worker(name, slots, ttl_s, now, token, replaces) -> 1, or 0 when refused
-- Counts the worker's slots until now + ttl_s (Redis's clock: a worker whose
-- own clock runs ahead must not outlive its registration, nor one behind
-- drop out early). Also drops workers whose registration expired, so `slots`
-- stays as small as the set of live workers.
--
-- `token` names the process behind the registration. Two live processes
-- started with the same node name (both cpu@host) would otherwise share one
-- registration: the window would count one's slots for both, and one's
-- shutdown would unregister the other. So a live registration is renewed
-- only by its own token: another token is refused (0, nothing counted) and
-- the clash is recorded for the snapshot until the refused registration
-- would have expired. Once the holder's registration lapses, the name is
-- free again; before that, only a caller that knows the holder is gone (a
-- worker restarted after a crash, dispatcher/worker.py) takes it over, by
-- naming the holder's token in `replaces`. An empty token (tests,
-- benchmarks) is neither checked nor kept.
local name, slots, token, replaces = ARGV[1], ARGV[2], ARGV[5] or '', ARGV[6] or ''
local now = clock(ARGV[4])
local expires_at = now + tonumber(ARGV[3])
local dead = redis.call('ZRANGEBYSCORE', WORKERS, '-inf', fmt(now))
if #dead > 0 then
  redis.call('ZREM', WORKERS, unpack(dead))
  redis.call('HDEL', SLOTS, unpack(dead))
  redis.call('HDEL', TOKENS, unpack(dead))
end
if token ~= '' then
  local holder = redis.call('HGET', TOKENS, name)
  if holder and holder ~= token and holder ~= replaces and redis.call('ZSCORE', WORKERS, name) then
    redis.call('HSET', CLASHES, name, cjson.encode({token = token, ['until'] = expires_at}))
    return 0
  end
  redis.call('HSET', TOKENS, name, token)
  local clash = redis.call('HGET', CLASHES, name)
  if clash and cjson.decode(clash).token == token then redis.call('HDEL', CLASHES, name) end
end
forget_window()
redis.call('ZADD', WORKERS, fmt(expires_at), name)
redis.call('HSET', SLOTS, name, slots)
return 1
