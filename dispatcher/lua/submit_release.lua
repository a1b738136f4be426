-- submit_release(job_id, key, cost, payload, weight, cap, rate, group, group_weight, group_cap, group_rate,
--                due, now, delay, tag, release_lease_s, default_window, headroom) -> {accepted, id, payload, ...}
-- submit then release, in one call: the hot path of a single enqueue. The
-- release runs only when the submit made a group eligible (see `submit`).
local accepted, woke, message = submit(ARGV, true)
if message then return {accepted, ARGV[1], message} end
local out = {}
if woke then out = release(ARGV[13], tonumber(ARGV[16]), tonumber(ARGV[17]), tonumber(ARGV[18]), 0) end
table.insert(out, 1, accepted)
return out
