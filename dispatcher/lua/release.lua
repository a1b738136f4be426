-- release(now, release_lease_s, default_window, headroom, limit) -> {id, payload, ...}
-- limit 0 means "as many as the window allows".
return release(ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]))
