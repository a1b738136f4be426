-- health(now, default_window, headroom) -> JSON {eligible, in_flight, window, progress_at, missing}
-- O(1) but for the window's count after a registration change: what the
-- health check needs to tell a lane that works from one that holds work
-- and moves nothing. progress_at: the last release, start, heartbeat or
-- finish (`note_progress`); a lane that never moved since its state was
-- made (a fresh Redis) counts from the first time it is asked, which this
-- call records.
local now = clock(ARGV[1])
local size = window(now, tonumber(ARGV[2]), tonumber(ARGV[3]))
if not M().lp then mset('lp', fmt(now)) end
return cjson.encode({
  eligible = redis.call('ZCARD', ACTIVE), in_flight = in_flight_total(), window = size,
  progress_at = tonumber(M().lp), now = now, missing = redis.call('HLEN', MISSING),
})
