-- unregister_worker(name, token) -> 1, or 0 when the registration is another's
-- Stop counting a worker's slots (clean shutdown). With a token, only the
-- registration that token holds: a process whose registration was refused
-- (register_worker: the same name as another live one) leaves the live one
-- alone, and only its own clash record goes.
local name, token = ARGV[1], ARGV[2] or ''
if token ~= '' then
  local clash = redis.call('HGET', CLASHES, name)
  if clash and cjson.decode(clash).token == token then redis.call('HDEL', CLASHES, name) end
  local holder = redis.call('HGET', TOKENS, name)
  if holder and holder ~= token then return 0 end
end
forget_window()
redis.call('ZREM', WORKERS, name)
redis.call('HDEL', SLOTS, name)
redis.call('HDEL', TOKENS, name)
return 1
