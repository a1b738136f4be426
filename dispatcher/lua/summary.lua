-- summary(now, default_window, headroom) -> JSON
-- What the pages and estimates ask of a lane on every poll, in O(1): kept by
-- each call that changes it (lua/_lib.lua, update_summary), never a scan of
-- the keys, so its cost does not grow with the users who have work.
-- {active_weight (the weights of the keys with work, waiting or in flight),
-- busy_keys, waiting (jobs), waiting_keys, in_flight, window, eligible (keys
-- whose turn can come now), delayed, and the work for an autoscaler:
-- waiting_cost_s and in_flight_cost_s (estimated worker seconds), served_s
-- (measured worker seconds of every attempt that ended: a counter) and
-- cost_ratio (measured / estimated over the last few hundred finishes; 1
-- before any); and, a level up, busy_groups and group_active_weight (the
-- groups with work and their weights: a key without a group is a group of
-- its own)}
local now = clock(ARGV[1])
local size = window(now, tonumber(ARGV[2]), tonumber(ARGV[3]))
local m = M()
local ra, re = tonumber(m.ra) or 0, tonumber(m.re) or 0
return cjson.encode({
  active_weight = (tonumber(m.aw) or 0) / 1e6, busy_keys = tonumber(m.ak) or 0,
  waiting = tonumber(m.bt) or 0, waiting_keys = tonumber(m.kb) or 0, in_flight = in_flight_total(),
  window = size, eligible = redis.call('ZCARD', ACTIVE), delayed = redis.call('ZCARD', DELAYED),
  waiting_cost_s = (tonumber(m.wc) or 0) / 1000, in_flight_cost_s = (tonumber(m.fc) or 0) / 1000,
  served_s = (tonumber(m.sv) or 0) / 1000, cost_ratio = re > 0 and ra / re or 1,
  busy_groups = tonumber(m.gk) or 0, group_active_weight = (tonumber(m.gw) or 0) / 1e6,
})
