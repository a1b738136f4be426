-- snapshot(now, default_window, headroom) -> JSON
-- For the admin and metrics, not the hot path: O(keys and groups with
-- backlog or jobs in flight). One script, so the numbers are consistent with
-- each other. Groups with an eligible key are exactly those in active, capped
-- and throttled; keys with a backlog are their groups' eligible and capped
-- keys and `mthrottled`'s, or have jobs in flight; so no SCAN is needed.
local now, default_window, headroom = clock(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local group_states, states = {}, {}
for _, G in ipairs(redis.call('ZRANGE', ACTIVE, 0, -1)) do group_states[G] = 'active' end
for _, G in ipairs(redis.call('SMEMBERS', CAPPED)) do group_states[G] = 'capped' end
for _, G in ipairs(redis.call('ZRANGE', THROTTLED, 0, -1)) do group_states[G] = 'throttled' end
-- An eligible key is as its group is: active, or parked with it at the
-- group's cap or for the group's token.
for G, group_state in pairs(group_states) do
  if is_solo(G) then states[string.sub(G, 4)] = group_state end
  for _, k in ipairs(redis.call('ZRANGE', members(G), 0, -1)) do states[k] = group_state end
  for _, k in ipairs(redis.call('SMEMBERS', capped_members(G))) do states[k] = 'capped' end
end
for _, k in ipairs(redis.call('ZRANGE', MTHROTTLED, 0, -1)) do states[k] = 'throttled' end
-- Keys with jobs in flight and nothing eligible: found through the jobs in
-- flight (O(window)); parked at their cap when their group has none eligible.
local in_flight = redis.call('ZRANGE', INFLIGHT, 0, -1)
for _, id in ipairs(in_flight) do
  local job = load_job(id)
  if job and not states[job.k] then
    local capped = backlog_of(job.k) > 0 and redis.call('SISMEMBER', capped_members(group_of(job.k)), job.k) == 1
    states[job.k] = capped and 'capped' or 'in_flight_only'
  end
end

-- A group's name as its submits give it: none for a group of its own.
local function public_group(G)
  if string.sub(G, 1, 3) == '@g:' then return string.sub(G, 4) end
  return nil
end

local keys, groups, held, counted = {}, {}, 0, {active = 0, capped = 0, throttled = 0}
for k, state in pairs(states) do
  local n = backlog_of(k)
  held = held + n
  if counted[state] then counted[state] = counted[state] + 1 end
  local G = group_of(k)
  -- A key of its own group: the group's virtual time is the key's in the
  -- lane (one level, as before groups); a member's is its time within its group.
  keys[k] = {
    state = state, backlog = n, in_flight = in_flight_of(k),
    weight = weight(k), cap = cap_of(k), vt = public_group(G) and vt_of(k) or vt_of(G),
    group = public_group(G) or cjson.null,
  }
  local name = public_group(G)
  if name then
    local group = groups[name]
    if not group then
      group = {state = group_states[G] or (in_flight_of(G) > 0 and 'in_flight_only' or 'idle'),
               backlog = backlog_of(G), in_flight = in_flight_of(G), weight = weight(G), cap = cap_of(G),
               vt = vt_of(G), members = {}}
      groups[name] = group
    end
    group.members[#group.members + 1] = k
  end
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
  groups = groups,
  worker_clashes = clashes,
  totals = {
    active_keys = counted.active, capped_keys = counted.capped, throttled_keys = counted.throttled,
    active_groups = redis.call('ZCARD', ACTIVE), held = held,
    in_flight = #in_flight, delayed = redis.call('ZCARD', DELAYED),
    window = window(now, default_window, headroom), V = vclock(),
  },
})
