-- share(key) -> JSON {weight, cap, busy, group, group_weight, group_cap,
--                     group_busy_weight, lane_busy_weight}
-- What a key's share of the lane is made of, in O(1) (one HMGET, two when
-- the key has a named group): its weight and cap and whether it has work;
-- its group (null: a group of its own, whose weight is the key's) with the
-- group's weight and cap; the weights of its group's members with work
-- (group_busy_weight) and of the lane's groups with work (lane_busy_weight).
-- A busy key's share of the lane's worker time is
--   group_weight / lane_busy_weight * weight / group_busy_weight
-- (scheduler.share_basis adds its own weights for an idle key).
local k = ARGV[1]
prefetch(true, {k, solo(k)})
local G = group_of(k)
local named = string.sub(G, 1, 3) == '@g:'
local function busy(name) return backlog_of(name) > 0 or in_flight_of(name) > 0 end
return cjson.encode({
  weight = weight(k), cap = cap_of(k), busy = busy(k),
  group = named and string.sub(G, 4) or cjson.null,
  group_weight = weight(G), group_cap = cap_of(G),
  group_busy_weight = (tonumber(key(G).mw) or 0) / 1e6,
  lane_busy_weight = (tonumber(M().gw) or 0) / 1e6,
})
