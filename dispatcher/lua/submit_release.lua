-- submit_release(job_id, key, cost, payload, weight, cap, rate, due, now, delay, tag,
--                release_lease_s, default_window, headroom) -> {accepted, id, payload, ...}
-- submit then release, in one call: the hot path of a single enqueue.
local now = clock(ARGV[9])
local accepted = submit(ARGV, now)
local out = release(now, tonumber(ARGV[12]), tonumber(ARGV[13]), tonumber(ARGV[14]), 0)
table.insert(out, 1, accepted)
return out
