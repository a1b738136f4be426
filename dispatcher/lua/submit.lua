-- submit(job_id, key, cost, payload, weight, cap, rate, due, now, delay, tag) -> 1 | 0
-- Empty weight/cap/rate/due mean "leave as is" / "not delayed"; `delay`
-- (seconds) instead of `due` delays from Redis's clock; cap "0" and
-- rate "0" remove the key's cap / rate limit. A non-empty `tag` is the
-- suffix of the message id on the job's first release (its submitter has
-- announced that id to Flower); empty: the release's own. Returns 0 and
-- changes nothing when the job id is known in any state: duplicate or
-- concurrent submitters cannot put one job in twice, which is what makes
-- release exactly-once. Does not release (submit_release.lua does).
return (submit(ARGV))
