-- snapshot(now, default_window, headroom) -> JSON
-- For the admin and metrics, not the hot path: O(keys with backlog or jobs in
-- flight). One script, so the numbers are consistent with each other. Keys
-- with a backlog are exactly those in active, capped or throttled, so no
-- SCAN is needed.
local now, default_window, headroom = clock(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local states = {}
for _, k in ipairs(redis.call('ZRANGE', ACTIVE, 0, -1)) do states[k] = 'active' end
for _, k in ipairs(redis.call('SMEMBERS', CAPPED)) do states[k] = 'capped' end
for _, k in ipairs(redis.call('ZRANGE', THROTTLED, 0, -1)) do states[k] = 'throttled' end
-- Keys with jobs in flight but nothing waiting: found through the jobs in
-- flight (O(window)).
local in_flight = redis.call('ZRANGE', INFLIGHT, 0, -1)
for _, id in ipairs(in_flight) do
  local job = load_job(id)
  if job then states[job.k] = states[job.k] or 'in_flight_only' end
end

local keys, held = {}, 0
for k, state in pairs(states) do
  local n = backlog_of(k)
  held = held + n
  keys[k] = {
    state = state, backlog = n, in_flight = in_flight_of(k),
    weight = weight(k), cap = cap_of(k), vt = vt_of(k),
  }
end
-- Worker names that two live processes claim (register_worker): name ->
-- {registered = the holder's token, refused = the other's}. Empty normally.
local clashes, flat = {}, redis.call('HGETALL', CLASHES)
for i = 1, #flat, 2 do
  local clash = cjson.decode(flat[i + 1])
  if clash['until'] > now then
    clashes[flat[i]] = {registered = redis.call('HGET', TOKENS, flat[i]) or '', refused = clash.token}
  end
end
return cjson.encode({
  keys = keys,
  worker_clashes = clashes,
  totals = {
    active_keys = redis.call('ZCARD', ACTIVE), capped_keys = redis.call('SCARD', CAPPED),
    throttled_keys = redis.call('ZCARD', THROTTLED), held = held,
    in_flight = #in_flight, delayed = redis.call('ZCARD', DELAYED),
    window = window(now, default_window, headroom), V = vclock(),
  },
})
