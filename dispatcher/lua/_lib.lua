-- Shared prelude of the dispatcher's Redis function library: scheduler.py
-- builds the library from it and one function per script file in this
-- folder, each file holding only its own operation. Loaded once (FUNCTION
-- LOAD), so the helpers below are defined once, not on every call as a
-- script's would be: that alone was a sixth of the dispatcher's Redis CPU.
--
-- KEYS[1] is the lane prefix "{fair:<lane>}:<layout>:" and every key below is
-- derived from it when a call begins (`begin`). Redis Cluster wants a script's keys declared in KEYS; it accepts
-- derived keys when they hash to the declared key's slot, which the shared
-- "{fair:<lane>}" hash tag guarantees (and a cluster client routes the call by
-- KEYS[1]).
--
-- Numbers are written with %.17g: Redis would otherwise format Lua numbers
-- with %.14g, and the virtual clock would drift by rounding on every write.
local P, H, ACTIVE, CAPPED, THROTTLED, MTHROTTLED, DELAYED, INFLIGHT, WORKERS, SLOTS, TOKENS, CLASHES, QUEUE
local HOLDS, MISSING
-- H, one hash for everything the hot path reads and writes, so that a call
-- reads what it needs with one HMGET (two in a release: the next key and
-- job are known only once `active` is asked) and writes everything it
-- changed with one HSET at its end (`flush`). Its fields, told apart by what
-- comes before the first '|' (ids and keys may hold '|' themselves):
-- 'j|' .. id, a job's record, and 'p|' .. id, its message (see `load_job`);
-- <field> .. '|' .. key, a fairness key's settings and state (see
-- KEY_FIELDS); and, without a '|', the lane's own numbers (META_FIELDS):
-- V, the virtual clock; nd, a time no later
-- than the earliest delayed job or throttled key ('none': there are none), so
-- a release skips both scans until then; ws / wn, the live workers' slots
-- and count, valid from wa until wu (the earliest registration expiry;
-- register_worker and unregister_worker invalidate it); fl, the number of
-- jobs in flight (ZCARD of `inflight`, counted again whenever the workers
-- are, so that no mistake could last); lp, when the lane last made
-- progress (a release, a start, a running job's heartbeat or a finish), for
-- the health check (`health`).
-- Which process holds each live worker name (its instance token), and the
-- names another live process tried to register as well: name -> JSON
-- {token = the refused one, ['until'] = when the record lapses}.
-- The Celery queue (a kombu Redis list) that release pushes messages to;
-- absent: release only returns them. Not under the hash tag: in Redis
-- Cluster the lane's queue must be made to share the lane's slot.
-- Which jobs each worker process says it holds (`holding`), and since when
-- a released job was found in no queue and held by no one (`recover_orphans`).
-- Where a stored message (dispatcher/message.py) carries its release tag.
local RELEASE_TAG = '~release~'

-- Due delayed jobs, ready throttled keys and expired leases are handled at
-- most this many per call: a script blocks the whole Redis while it runs, and
-- 100 keeps a call well under a millisecond. The rest is taken by the next
-- call (next_wakeup reports it as due already, so the ticker comes right back).
local BATCH = 100

-- Rate tokens are compared with this slack: refilling for exactly the wait the
-- bucket asked for can land on 0.9999999999 by rounding, and the key would be
-- throttled again for a femtosecond.
local TOKEN_EPSILON = 1e-9

local function fmt(x) return string.format('%.17g', x) end

-- `s` with every `find` replaced by `repl`, both plain strings. Not
-- string.gsub: its pattern matcher tries a match at every byte of a 1.4 KB
-- message, which made it a fifth of the dispatcher's Redis instructions
-- (make bench-redis-cost); string.find with plain=true is a memory search.
local function replace_plain(s, find, repl)
  local parts, from = {}, 1
  while true do
    local first, last = string.find(s, find, from, true)
    if not first then break end
    parts[#parts + 1] = string.sub(s, from, first - 1)
    parts[#parts + 1] = repl
    from = last + 1
  end
  if from == 1 then return s end
  parts[#parts + 1] = string.sub(s, from)
  return table.concat(parts)
end

-- One clock for every host: Redis's. Callers on different hosts disagree
-- about the time (by minutes, on a badly kept host); every lease, due time,
-- registration and token bucket is compared against TIME here, never against
-- a caller's clock. An explicit time (non-empty argument) is for tests that
-- drive time themselves.
-- Read once per call: one call is one instant, and a submit that tries a
-- direct release and then the ordinary one asks for the time once.
local call_now
local function clock(arg)
  if arg and arg ~= '' then return tonumber(arg) end
  if not call_now then
    local t = redis.call('TIME')
    call_now = tonumber(t[1]) + tonumber(t[2]) / 1e6
  end
  return call_now
end

-- A due time given as an absolute time or as a delay from now (a retry's
-- backoff: relative, so the caller's clock does not matter). Nil: not delayed.
local function due_time(due, delay, now)
  if delay and delay ~= '' then return now + tonumber(delay) end
  return tonumber(due)
end
local function backlog(k) return P .. 'q:' .. k end
-- Two levels (see dispatcher/__init__.py): the lane shares its slots between
-- groups (organisations), each group what it gets between its members (the
-- fairness keys: users). A group is named, in the tables below and in H,
-- '@g:' .. its name, or '@k:' .. k for a key submitted without one (a group
-- of its own: one level, exactly as before groups). Keys may not begin with
-- '@'. `active`, `capped` and `throttled` hold groups; a named group's
-- eligible members (see `enter_members`) are in the sorted set
-- members(G) (a group of its own has one member, its key: no set); its
-- members at their cap in the set capped_members(G); members out of rate
-- tokens in the lane's `mthrottled`.
local function members(G) return P .. 'ma:' .. G end
local function capped_members(G) return P .. 'mc:' .. G end
local function solo(k) return '@k:' .. k end
local function is_solo(G) return string.sub(G, 1, 3) == '@k:' end

-- The per-call cache of H. Every script reads a field of H at most once,
-- changes it in these tables, and every changed field is written with one
-- HSET (one HDEL for those deleted) when the call ends (every function calls
-- `flush()` last: scheduler.py): a job's finish and the next release read H
-- twice and write it once, however many of the lane's, keys' and jobs'
-- fields they touch. The lane's numbers and each key's fields are kept as
-- tables of their short names, jobs' fields by their names in H; each
-- `*_orig` holds what a field was before the call first set it (`remember`),
-- so that its keys are the fields to write and a field written back
-- unchanged is not written. H's names for the lane's and keys' fields are
-- built only to read and to write. Absent fields are false; a field set to
-- false is deleted.
local meta, meta_orig
local key_cache, key_orig
local job_val, job_orig

-- A call begins: the lane's key names, empty caches.
local function begin(keys)
  P = keys[1]
  H = P .. 'h'
  ACTIVE, CAPPED, THROTTLED = P .. 'active', P .. 'capped', P .. 'throttled'
  MTHROTTLED = P .. 'mthrottled'
  DELAYED, INFLIGHT = P .. 'delayed', P .. 'inflight'
  WORKERS, SLOTS = P .. 'workers', P .. 'slots'
  TOKENS, CLASHES = P .. 'worker_token', P .. 'worker_clash'
  HOLDS, MISSING = P .. 'holds', P .. 'missing'
  QUEUE = keys[2]
  call_now = nil
  meta, meta_orig = nil, {}
  key_cache, key_orig = {}, {}
  job_val, job_orig = {}, {}
end

-- sq: the lane's count of backlog entries ever pushed, which numbers each
-- entry (see `push_backlog`). The lane's summary, kept by `flush` from
-- what each call changed so that no reader scans the keys (`summary`): aw,
-- the weights (in millionths) of the keys with work, waiting or in flight;
-- ak, how many they are; bt, the jobs waiting; kb, the keys with some.
-- The work, for an autoscaler (see `count_cost`): wc and fc, the estimated
-- cost in milliseconds of the jobs waiting in backlogs and in flight; sv,
-- the measured worker milliseconds of every attempt that ended (a counter);
-- ra and re, the measured and estimated costs of the jobs finished lately
-- (each older finish weighs 1/256 less), whose ratio corrects estimates.
-- gw and gk, the weights (millionths) and count of the groups with work.
-- cm, how many keys wait at their own cap (in some capped_members(G)).
local META_FIELDS = {'V', 'nd', 'ws', 'wn', 'wu', 'wa', 'fl', 'lp', 'sq', 'aw', 'ak', 'bt', 'kb',
                     'wc', 'fc', 'sv', 'ra', 're', 'gw', 'gk', 'cm'}
-- A fairness key's fields: vt (its virtual time), w (weight), cap, rate
-- ("tokens_per_s:burst"), bucket ("tokens:updated_at"), n (its jobs in
-- flight), pol (the settings "weight|cap|rate" as submit last applied them),
-- b (the jobs waiting in its backlog, kept beside the list so that a release
-- knows whether the key stays eligible without asking) and x (the list's
-- stale entries: jobs that left from the middle of the backlog, which a
-- release skips when it reaches them; see `leave_backlog`); g, its group
-- when it has a named one. A group's fields (GROUP_FIELDS) are vt, its
-- virtual time in the lane; w, cap, rate, bucket and pol, its own
-- settings; b and n, its members' jobs waiting and in flight; gv (the
-- virtual clock of its members), me (how many members are eligible), mw
-- (the weights, in millionths, of its members with work). Each read asks
-- only for its kind's fields: every field read is Lua work on every call.
local KEY_FIELDS = {'vt', 'w', 'cap', 'rate', 'bucket', 'n', 'pol', 'b', 'x', 'g'}
local GROUP_FIELDS = {'vt', 'w', 'cap', 'rate', 'bucket', 'n', 'pol', 'b', 'gv', 'me', 'mw'}
local function fields_of(name) return string.byte(name, 1) == 64 and GROUP_FIELDS or KEY_FIELDS end  -- 64: '@'

-- One HMGET for whichever of the lane's numbers (`with_meta`), the fields
-- of key or group k (nil, a name or a list of names) and the job fields
-- `jobs` (H's names) the call has not read yet.
local function prefetch(with_meta, k, jobs)
  local fields = {}
  local load_meta = with_meta and not meta
  if load_meta then
    for i, f in ipairs(META_FIELDS) do fields[i] = f end
  end
  local load = {}
  for _, name in ipairs(type(k) == 'table' and k or {k}) do
    if name and not key_cache[name] and not load[name] then
      load[#load + 1] = name
      load[name] = #fields
      for _, f in ipairs(fields_of(name)) do fields[#fields + 1] = f .. '|' .. name end
    end
  end
  local after_key = #fields
  if jobs then
    for _, f in ipairs(jobs) do
      if job_val[f] == nil then fields[#fields + 1] = f end
    end
  end
  if #fields == 0 then return end
  local raw = redis.call('HMGET', H, unpack(fields))
  if load_meta then
    meta = {}
    for i, f in ipairs(META_FIELDS) do meta[f] = raw[i] end
  end
  for _, name in ipairs(load) do
    local info, at = {}, load[name]
    for i, f in ipairs(fields_of(name)) do info[f] = raw[at + i] end
    key_cache[name] = info
  end
  for i = after_key + 1, #fields do job_val[fields[i]] = raw[i] end
end

-- What a field set before it was read was: it is always written.
local UNREAD = {}

-- Notes what `field` of `values` was before the call first sets it.
local function remember(orig, values, field)
  if orig[field] == nil then
    local was = values[field]
    if was == nil then was = UNREAD end
    orig[field] = was
  end
end

local function M()
  if not meta then prefetch(true) end
  return meta
end

local function mset(field, value)
  local m = M()
  remember(meta_orig, m, field)
  m[field] = value
end

local function key(k)
  local info = key_cache[k]
  if not info then
    prefetch(false, k)
    info = key_cache[k]
  end
  return info
end

local function kset(k, field, value)
  local info, orig = key(k), key_orig[k]
  if not orig then
    orig = {}
    key_orig[k] = orig
  end
  remember(orig, info, field)
  info[field] = value
end

local function jget(f)
  if job_val[f] == nil then prefetch(false, nil, {f}) end
  return job_val[f]
end

local function jput(f, value)
  remember(job_orig, job_val, f)
  job_val[f] = value
end

local function vt_of(k) return tonumber(key(k).vt) or 0 end
local function weight(k) return tonumber(key(k).w) or 1 end
local function cap_of(k) return tonumber(key(k).cap) or 0 end
local function in_flight_of(k) return tonumber(key(k).n) or 0 end
local function backlog_of(k) return tonumber(key(k).b) or 0 end
local function stale_of(k) return tonumber(key(k).x) or 0 end
local function set_stale(k, n) kset(k, 'x', n > 0 and string.format('%d', n) or false) end
local function count_field(k, field, n) kset(k, field, n > 0 and string.format('%d', n) or false) end
-- The group key k is in (see `members`).
local function group_of(k) return key(k).g or solo(k) end
-- The jobs waiting in key k's backlog are `n` now (and its group's waiting
-- jobs change as much). When none is left, the list holds stale entries at
-- most: it goes (one DEL, only then).
local function set_backlog(k, n)
  local was = backlog_of(k)
  count_field(k, 'b', n)
  if n ~= was then
    local G = group_of(k)
    count_field(G, 'b', backlog_of(G) + math.max(0, n) - was)
  end
  if n <= 0 and stale_of(k) > 0 then
    redis.call('DEL', backlog(k))
    set_stale(k, 0)
  end
end
-- A backlog entry is "<job id>|<g>": g numbers every entry ever pushed in the
-- lane (sq), and a job's record holds its live entry's g. An entry whose job
-- has no record, is not held, or holds another g is stale: its job left
-- from the middle of the backlog (canceled, or started or finished while a
-- reap had put it back), which costs O(1), not the LREM of a list of any
-- length, and the release that reaches the entry drops it. The number, not
-- a check of `inflight`, tells a job's live entry from an older one (a job
-- canceled and then submitted again has both; a release leaves the record
-- as it is, so the record alone could not).
local function entry_of(id, g) return id .. '|' .. g end

-- The lane's work in estimated milliseconds: `field` (wc, the jobs waiting;
-- fc, the jobs in flight) changes by job's cost, `sign` 1 or -1. Integers,
-- so that millions of changes accumulate no rounding.
local function count_cost(field, job, sign)
  local total = (tonumber(M()[field]) or 0) + sign * math.floor((tonumber(job.c) or 0) * 1000 + 0.5)
  mset(field, total ~= 0 and string.format('%d', total) or false)
end
local function entry_parts(entry)
  local id, g = string.match(entry, '^(.*)|(%d+)$')
  return id, tonumber(g)
end
-- Job `id` (its record `job`, saved by the caller) joins key k's backlog, at
-- the front or the back, under a new entry number. Returns the key's waiting jobs.
local function push_backlog(k, id, job, front)
  local g = (tonumber(M().sq) or 0) + 1
  mset('sq', string.format('%d', g))
  job.g = g
  redis.call(front and 'LPUSH' or 'RPUSH', backlog(k), entry_of(id, g))
  count_cost('wc', job, 1)
  local n = backlog_of(k) + 1
  set_backlog(k, n)
  return n
end

-- A field to write (or, false, to delete) when the call ends.
local function stage(set, del, name, value)
  if value then
    set[#set + 1] = name
    set[#set + 1] = value
  else
    del[#del + 1] = name
  end
end

-- Stages each field of `values` the call set to other than it was, named
-- in H by its name and `suffix`.
local function stage_changed(set, del, values, orig, suffix)
  for f, was in pairs(orig) do
    if values[f] ~= was then stage(set, del, suffix and f .. suffix or f, values[f]) end
  end
end

-- What a key or group adds to the lane's summary (see META_FIELDS) with
-- fields b, n, w: its weight (millionths) and 1 when it has work, its jobs
-- waiting, and 1 when it has some.
local function summary_of(b, n, w)
  b, n = tonumber(b) or 0, tonumber(n) or 0
  local busy = (b > 0 or n > 0) and 1 or 0
  return busy * math.floor((tonumber(w) or 1) * 1e6 + 0.5), busy, b, b > 0 and 1 or 0
end

local function add_count(values, field, delta, setter)
  if delta ~= 0 then
    local total = (tonumber(values[field]) or 0) + delta
    setter(field, total ~= 0 and string.format('%d', total) or false)
  end
end

-- The summary follows the keys and groups whose b, n or w the call
-- changed: what each adds now less what it added before. A key's count in
-- the lane (aw, ak, bt, kb) and in its group (mw), a group's in the lane
-- (gw, gk). Integers (weights in millionths), so that no rounding
-- accumulates over millions of changes.
local function update_summary()
  local d, member_weight = {0, 0, 0, 0, 0, 0}, {}
  for k, orig in pairs(key_orig) do
    if orig.b ~= nil or orig.n ~= nil or orig.w ~= nil then
      local now_ = key_cache[k]
      local function was(f)
        if orig[f] ~= nil then return orig[f] end
        return now_[f]
      end
      local before, after = {summary_of(was('b'), was('n'), was('w'))}, {summary_of(now_.b, now_.n, now_.w)}
      if string.sub(k, 1, 1) == '@' then
        d[5], d[6] = d[5] + after[1] - before[1], d[6] + after[2] - before[2]
      else
        for i = 1, 4 do d[i] = d[i] + after[i] - before[i] end
        if after[1] ~= before[1] then
          local G = now_.g or solo(k)
          member_weight[G] = (member_weight[G] or 0) + after[1] - before[1]
        end
      end
    end
  end
  for G, delta in pairs(member_weight) do
    add_count(key(G), 'mw', delta, function(f, v) kset(G, f, v) end)
  end
  for i, f in ipairs({'aw', 'ak', 'bt', 'kb', 'gw', 'gk'}) do add_count(M(), f, d[i], mset) end
end

-- Writes what the call changed; every script ends with it.
local function flush()
  update_summary()
  local set, del = {}, {}
  stage_changed(set, del, meta, meta_orig)
  for k, orig in pairs(key_orig) do stage_changed(set, del, key_cache[k], orig, '|' .. k) end
  stage_changed(set, del, job_val, job_orig)
  if #set > 0 then redis.call('HSET', H, unpack(set)) end
  if #del > 0 then redis.call('HDEL', H, unpack(del)) end
end

-- A job record ('j|' .. id) is {k = fairness key, c = estimated cost, s =
-- state, t = the message id's tag for its next release when its submitter
-- chose one}; the payload (a whole Celery message) sits in its own field
-- ('p|' .. id) so that state changes never decode or re-encode it. s is 'held', 'delayed' or
-- 'running'; a released job is a held one in `inflight` (`in_flight`): a
-- release leaves the record as it is, one write less per job, so its tag is
-- dropped where a job comes back for another release instead (reap,
-- requeue).
local function record_field(id) return 'j|' .. id end
local function payload_field(id) return 'p|' .. id end

local function load_job(id)
  local raw = jget(record_field(id))
  if raw then return cjson.decode(raw) end
  return nil
end

local function save_job(id, job) jput(record_field(id), cjson.encode(job)) end

local function forget_job(id)
  jput(record_field(id), false)
  jput(payload_field(id), false)
end

local function vclock() return tonumber(M().V) or 0 end

-- Jobs in flight, and a change to their number: called just before every
-- ZADD of a new member to `inflight` and every ZREM from it.
local function in_flight_total()
  if not M().fl then mset('fl', string.format('%d', redis.call('ZCARD', INFLIGHT))) end
  return tonumber(M().fl)
end
local function count_flight(delta) mset('fl', string.format('%d', in_flight_total() + delta)) end

-- The lane made progress at `now_arg` (a test's time) or at the time this
-- call read already: a job was released, started, renewed or finished. The
-- health check compares it with the clock (`health`); a call that has not
-- read the clock (a finish into a window still full) leaves it, and the next
-- call that moves anything sets it.
local function note_progress(now_arg)
  local at = (now_arg and now_arg ~= '' and tonumber(now_arg)) or call_now
  if at then mset('lp', fmt(at)) end
end

-- A delayed job or a throttled key is due at `at`: a release must look before then.
local function note_due(at)
  local nd = M().nd
  if nd == 'none' or (nd and tonumber(nd) > at) then mset('nd', fmt(at)) end
end

-- Invariants kept by every script. A key is in exactly one of its group's
-- eligible members, capped_members(G) and `mthrottled` exactly when its
-- backlog is not empty. A group is in exactly one of `active`, `capped` and
-- `throttled` exactly when it has an eligible member (me > 0). A named
-- group's eligible members are members(G), scored by their virtual start
-- within the group while there are two or more (a sole member's score is
-- not kept: it is set afresh when a second one comes). A (re)activating key
-- starts at max(its vt, its group's clock gv), a group at max(its vt, V):
-- time spent idle earns no credit, at either level.
local function eligible_count(G) return tonumber(key(G).me) or 0 end

-- Key k parks at its cap in group G / leaves that parking (returns whether
-- it was there); `cm` counts the parked keys, for the staff page.
local function count_capped(delta)
  local n = (tonumber(M().cm) or 0) + delta
  mset('cm', n > 0 and string.format('%d', n) or false)
end
local function park_capped(G, k)
  if redis.call('SADD', capped_members(G), k) == 1 then count_capped(1) end
end
local function unpark_capped(G, k)
  local was = redis.call('SREM', capped_members(G), k) == 1
  if was then count_capped(-1) end
  return was
end
local function group_start(G) return math.max(vt_of(G), vclock()) end
local function member_start(k, G) return math.max(vt_of(k), tonumber(key(G).gv) or 0) end

-- Key k, whose backlog is not empty, becomes eligible in group G (it was
-- not). Returns true when G entered `active` (it had no eligible member).
local function enter_members(G, k)
  local n = eligible_count(G)
  count_field(G, 'me', n + 1)
  if is_solo(G) then
  elseif n == 1 then  -- a second one: the first's start is set afresh beside it
    local sole = redis.call('ZRANGE', members(G), 0, 0)[1]
    prefetch(false, {sole, k})
    redis.call('ZADD', members(G), fmt(member_start(sole, G)), sole, fmt(member_start(k, G)), k)
  else
    redis.call('ZADD', members(G), fmt(member_start(k, G)), k)
  end
  if n == 0 then
    redis.call('ZADD', ACTIVE, fmt(group_start(G)), G)
    return true
  end
  return false
end

-- Key k stops being eligible in group G (parked at its cap or for a
-- token, or its backlog empty); nothing when it was not. The last one to
-- go takes the group out of the lane's sets (`where`: the one set it is
-- known to be in, else all three are asked).
local function leave_members(G, k, where)
  local n = eligible_count(G)
  if n == 0 or (not is_solo(G) and redis.call('ZREM', members(G), k) == 0) then return end
  count_field(G, 'me', n - 1)
  if n == 1 then
    if where then
      redis.call(where == CAPPED and 'SREM' or 'ZREM', where, G)
    else
      redis.call('ZREM', ACTIVE, G)
      redis.call('SREM', CAPPED, G)
      redis.call('ZREM', THROTTLED, G)
    end
  end
end

-- Whether key k is eligible in its group G.
local function is_eligible(k, G)
  if eligible_count(G) == 0 then return false end
  return is_solo(G) or redis.call('ZSCORE', members(G), k) ~= false
end

-- The way in for a key with work: it becomes eligible unless it is already,
-- or is parked at its cap or for a token (submit shortcuts it when the key's
-- backlog was empty). Returns true when its group entered `active`.
local function activate(k)
  if backlog_of(k) == 0 then return false end
  local G = group_of(k)
  if is_eligible(k, G) or redis.call('SISMEMBER', capped_members(G), k) == 1
      or redis.call('ZSCORE', MTHROTTLED, k) then
    return false
  end
  return enter_members(G, k)
end

-- A group out of `capped` or `throttled` (its cap freed, its token due, its
-- limits changed) is eligible again when it has an eligible member.
local function reactivate_group(G)
  if eligible_count(G) > 0 then redis.call('ZADD', ACTIVE, fmt(group_start(G)), G) end
end

local function untrack_if_empty(k)
  if backlog_of(k) == 0 then
    local G = group_of(k)
    leave_members(G, k)
    unpark_capped(G, k)
    redis.call('ZREM', MTHROTTLED, k)
  end
end

-- A held job leaves its key's backlog from wherever it is in it: its entry
-- stays, stale (the caller forgets the record or changes its state), and a
-- release drops it when it reaches it. O(1) whatever the backlog's length.
local function leave_backlog(job)
  local k = job.k
  count_cost('wc', job, -1)
  set_stale(k, stale_of(k) + 1)
  set_backlog(k, backlog_of(k) - 1)
  untrack_if_empty(k)
end

-- Cost correction or refund, `delta` in worker seconds (actual less
-- charged), at both levels: key k's virtual time by delta / its weight,
-- its group's by delta / the group's. Each one's place in its set, if it
-- has one (XX: a named group's members while two or more are eligible;
-- `active`), follows, never below its clock (gv, V), which only move
-- forward. (Leaving the member's place until its next release saved a
-- command per finish, but skewed the shares within a group: 0.87 instead
-- of 1 between two equal members whose jobs' measured costs were 0.5x to
-- 4x the estimates.)
local function adjust_vt(k, delta)
  local G = group_of(k)
  local vt = vt_of(k) + delta / weight(k)
  kset(k, 'vt', fmt(vt))
  if backlog_of(k) > 0 and eligible_count(G) >= 2 and not is_solo(G) then
    redis.call('ZADD', members(G), 'XX', fmt(math.max(vt, tonumber(key(G).gv) or 0)), k)
  end
  local gvt = vt_of(G) + delta / weight(G)
  kset(G, 'vt', fmt(gvt))
  if eligible_count(G) > 0 then redis.call('ZADD', ACTIVE, 'XX', fmt(math.max(gvt, vclock())), G) end
end

-- Key k has `n` jobs in flight now, and its group as many more or fewer.
local function set_in_flight(k, n)
  local was = in_flight_of(k)
  n = math.max(0, n)
  kset(k, 'n', string.format('%d', n))
  local G = group_of(k)
  kset(G, 'n', string.format('%d', math.max(0, in_flight_of(G) + n - was)))
end

-- A released or running job stops counting against the window and its
-- key's and group's caps. A capped key or group is made eligible again
-- without checking its cap here: release checks caps when it picks one
-- (caps may have been lowered). Only a key or group with a cap can be in
-- capped_members(G) or `capped` (submit lets one out when its cap is
-- removed). `left_flight` when the caller has taken it out of `inflight`.
local function left_flight(job)
  local k = job.k
  count_flight(-1)
  count_cost('fc', job, -1)
  set_in_flight(k, in_flight_of(k) - 1)
  local G = group_of(k)
  if cap_of(k) > 0 and unpark_capped(G, k) then enter_members(G, k) end
  if cap_of(G) > 0 and redis.call('SREM', CAPPED, G) == 1 then reactivate_group(G) end
end

-- An attempt of `job` ended having used `actual` worker seconds (sv); a
-- finished job's also feeds the recent measured / estimated ratio (ra, re:
-- the sums of the last few hundred finishes, older ones weighing less), by
-- which an autoscaler corrects the estimates of the work still to do.
local function count_served(job, actual, finished)
  if not actual or actual <= 0 then return end
  mset('sv', string.format('%d', (tonumber(M().sv) or 0) + math.floor(actual * 1000 + 0.5)))
  if finished and (tonumber(job.c) or 0) > 0 then
    local keep = 1 - 1 / 256
    mset('ra', fmt((tonumber(M().ra) or 0) * keep + actual))
    mset('re', fmt((tonumber(M().re) or 0) * keep + job.c))
  end
end

local function leave_flight(id, job)
  redis.call('ZREM', INFLIGHT, id)
  left_flight(job)
end

-- Released or running (a held record in `inflight` is a released job).
local function in_flight(id) return redis.call('ZSCORE', INFLIGHT, id) ~= false end

-- Back to the front of its backlog: it was first in line when it left.
local function put_back(id, job)
  push_backlog(job.k, id, job, true)
  job.s = 'held'
  save_job(id, job)
  activate(job.k)
end

-- Remove a job that waits (held in a backlog or delayed).
local function drop_waiting(id, job)
  if job.s == 'delayed' then
    redis.call('ZREM', DELAYED, id)
  else
    leave_backlog(job)
  end
end

-- Token bucket "tokens_per_s:burst", state "tokens:updated_at", of a key or
-- a group. Returns 0 when a token was taken (or it has no rate), else the
-- seconds until one is. `peek`: only says, takes nothing.
local function take_token(k, now, peek)
  local spec = key(k).rate
  if not spec then return 0 end
  local per_s, burst = string.match(spec, '^([^:]+):([^:]+)$')
  per_s, burst = tonumber(per_s), tonumber(burst)
  local tokens, at = burst, now
  local state = key(k).bucket
  if state then
    local t, a = string.match(state, '^([^:]+):([^:]+)$')
    t, a = tonumber(t), tonumber(a)
    -- Time only moves forward for a bucket (a test may drive time back).
    tokens = math.min(burst, t + math.max(0, now - a) * per_s)
    at = math.max(a, now)
  end
  if tokens >= 1 - TOKEN_EPSILON then
    if not peek then kset(k, 'bucket', fmt(math.max(0, tokens - 1)) .. ':' .. fmt(at)) end
    return 0
  end
  if peek then return (1 - tokens) / per_s end
  kset(k, 'bucket', fmt(tokens) .. ':' .. fmt(at))
  return (1 - tokens) / per_s
end

-- The sum of live workers' slots plus headroom; before any worker registers,
-- default_window + headroom, so jobs already wait in the Celery queue when
-- the first worker comes up. Computed from the registrations (O(workers))
-- only when the cached sum has lapsed: the first registration expiry since
-- it was taken, or a register / unregister.
local function window(now, default_window, headroom)
  local m = M()
  local valid_from = tonumber(m.wa)
  local valid_until = m.wu == 'never' and math.huge or tonumber(m.wu)
  if not (valid_from and valid_until and now >= valid_from and now < valid_until) then
    local live = redis.call('ZRANGEBYSCORE', WORKERS, '(' .. fmt(now), '+inf', 'WITHSCORES')
    local names, total, first_expiry = {}, 0, math.huge
    for i = 1, #live, 2 do
      names[#names + 1] = live[i]
      first_expiry = math.min(first_expiry, tonumber(live[i + 1]))
    end
    if #names > 0 then
      for _, slots in ipairs(redis.call('HMGET', SLOTS, unpack(names))) do
        total = total + (tonumber(slots) or 0)
      end
    end
    mset('ws', string.format('%d', total))
    mset('wn', string.format('%d', #names))
    mset('wa', fmt(now))
    mset('wu', first_expiry == math.huge and 'never' or fmt(first_expiry))
    mset('fl', string.format('%d', redis.call('ZCARD', INFLIGHT)))
  end
  if tonumber(m.wn) == 0 then return default_window + headroom end
  return tonumber(m.ws) + headroom
end

-- Worker registrations changed: the next window() counts them again.
local function forget_window() mset('wu', false) end

-- How many more jobs the window takes now (0 or less: none).
local function room_in_window(now, default_window, headroom)
  return window(now, default_window, headroom) - in_flight_total()
end

-- The window is full, known without the clock: the cached count of slots
-- can only have lapsed by registrations expiring since (a registration
-- clears it, `forget_window`), which leaves fewer slots, or none, and then
-- the default window. Lets a submit that finds the lane busy, the common
-- case under load, skip the clock (TIME is a command). False: not known.
local function full_without_clock(default_window, headroom)
  local wn, ws = tonumber(M().wn), tonumber(M().ws)
  if not (M().wu and wn and ws) then return false end
  local most = wn == 0 and default_window or math.max(ws, default_window)
  return in_flight_total() >= most + headroom
end

-- The key has as many jobs in flight as its cap allows (0: no cap).
local function at_cap(k)
  local cap = cap_of(k)
  return cap > 0 and in_flight_of(k) >= cap
end

-- No delayed job or throttled key or group is due at `now` (see `nd`).
local function nothing_due(now)
  local nd = M().nd
  return nd == 'none' or (nd and tonumber(nd) > now)
end

local function promote_due(now)
  if nothing_due(now) then return end
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', DELAYED, '-inf', fmt(now), 'LIMIT', 0, BATCH)) do
    redis.call('ZREM', DELAYED, id)
    local job = load_job(id)
    -- A retry (f) was at the front of its backlog when it left; a new job
    -- scheduled for later joins the back like any other.
    local front = job.f
    if front then
      job.f = nil
      job.r = 1
    end
    job.s = 'held'
    push_backlog(job.k, id, job, front)
    save_job(id, job)
    activate(job.k)
  end
  for _, k in ipairs(redis.call('ZRANGEBYSCORE', MTHROTTLED, '-inf', fmt(now), 'LIMIT', 0, BATCH)) do
    redis.call('ZREM', MTHROTTLED, k)
    activate(k)
  end
  for _, G in ipairs(redis.call('ZRANGEBYSCORE', THROTTLED, '-inf', fmt(now), 'LIMIT', 0, BATCH)) do
    redis.call('ZREM', THROTTLED, G)
    reactivate_group(G)
  end
  local next_due = math.huge
  for _, set in ipairs({DELAYED, MTHROTTLED, THROTTLED}) do
    local head = redis.call('ZRANGE', set, 0, 0, 'WITHSCORES')
    if #head > 0 then next_due = math.min(next_due, tonumber(head[2])) end
  end
  mset('nd', next_due == math.huge and 'none' or fmt(next_due))
end

-- A release's message id suffix: the time in microseconds on Redis's clock,
-- unique per release of a job (the same job is not released twice within a
-- microsecond).
local function clock_tag(now) return string.format('%.0f', math.floor(now * 1e6)) end

-- A job of key k in group G leaves for the lane's queue. It is charged at
-- both levels: G starts at max(vt_G, V), V moves there and vt_G to the
-- start plus cost / G's weight; within G, k starts at max(vt_k, gv_G), gv_G
-- moves there and vt_k to the start plus cost / k's weight. It counts as in
-- flight (leased for `lease_s`), and its message gets its id's suffix: the
-- tag its submitter announced (a task-sent event for Flower) on the first
-- release of a message, then the clock's, so that a message id is never
-- pushed twice. Returns the message and G's new virtual time.
local function send(id, k, G, cost, payload, job_tag, now, lease_s)
  local g_start, k_start = group_start(G), member_start(k, G)
  if g_start ~= vclock() then mset('V', fmt(g_start)) end
  local g_finish = g_start + cost / weight(G)
  kset(G, 'vt', fmt(g_finish))
  if k_start ~= (tonumber(key(G).gv) or 0) then kset(G, 'gv', fmt(k_start)) end
  kset(k, 'vt', fmt(k_start + cost / weight(k)))
  count_flight(1)
  count_cost('fc', {c = cost}, 1)
  redis.call('ZADD', INFLIGHT, fmt(now + lease_s), id)
  set_in_flight(k, in_flight_of(k) + 1)
  local message = replace_plain(payload, RELEASE_TAG, job_tag)
  if QUEUE then redis.call('LPUSH', QUEUE, message) end
  return message, g_finish
end

-- The head of key k's backlog, popped (its id and entry), with its record
-- and message read in the same HMGET as the fields of the key and its
-- group G when the call has not read them yet. Stale entries on the way are
-- dropped (see `push_backlog`); nil when the list has no live one (b was
-- wrong).
local function pop_job(k, G)
  while true do
    local entry = redis.call('LPOP', backlog(k))
    if not entry then return nil end
    local id, g = entry_parts(entry)
    prefetch(false, {k, G}, {record_field(id), payload_field(id)})
    local raw = job_val[record_field(id)]
    if raw then
      local job = cjson.decode(raw)
      if job.s == 'held' and job.g == g then return id, entry end
    end
    set_stale(k, stale_of(k) - 1)
  end
end

-- Start-time fair queueing at two levels: the eligible group with the
-- smallest virtual start time goes next, and within it the eligible key
-- with the smallest (`send` charges both). A group found at its cap or out
-- of rate tokens leaves `active` for `capped` / `throttled`, a key for its
-- group's capped_members or `mthrottled` (and its group leaves `active`
-- when it has no other eligible key); every such move is undone by exactly
-- one later event (a finish, a token), so the loop's extra iterations are
-- paid for once per event. Returns id, payload, id, ...
local function release(now_arg, lease_s, default_window, headroom, limit)
  local out = {}
  -- Nothing due and a full window: nothing to release, and no clock to read.
  if M().nd == 'none' and full_without_clock(default_window, headroom) then return out end
  local now = clock(now_arg)
  promote_due(now)
  local room = room_in_window(now, default_window, headroom)
  if limit > 0 then room = math.min(room, limit) end
  if room <= 0 then return out end
  local tag = clock_tag(now)
  while room > 0 do
    local G = redis.call('ZRANGE', ACTIVE, 0, 0)[1]
    if not G then break end
    -- Its next key: a group of its own's key, by its name; else the first
    -- of members(G) (without reading the group's fields first: the pop
    -- below reads them with the key's and the job's).
    local k
    if is_solo(G) then
      k = string.sub(G, 4)
    else
      k = redis.call('ZRANGE', members(G), 0, 0)[1]
    end
    -- Its next job is popped first (stale entries on the way dropped), so
    -- that one HMGET reads the key's and group's fields, if the call has
    -- not yet, and the job's record and message; it goes back to the front
    -- if it cannot go (a cap, no token: only where there is a cap or a rate).
    local id, entry
    if k then id, entry = pop_job(k, G) end
    local parked = true
    if not k then
      -- No eligible key while me said there was one: the group leaves `active`, rather than stall it.
      redis.call('ZREM', ACTIVE, G)
      count_field(G, 'me', 0)
    elseif not id then
      -- The list ran out of live entries while b said there were some:
      -- b is set right and the key stops being eligible.
      set_backlog(k, 0)
      untrack_if_empty(k)
    elseif at_cap(G) then
      redis.call('ZREM', ACTIVE, G)
      redis.call('SADD', CAPPED, G)
    elseif at_cap(k) then
      leave_members(G, k, ACTIVE)
      park_capped(G, k)
    else
      local wait = take_token(G, now, true)
      if wait > 0 then
        redis.call('ZREM', ACTIVE, G)
        redis.call('ZADD', THROTTLED, fmt(now + wait), G)
        note_due(now + wait)
      else
        wait = take_token(k, now)
        if wait > 0 then
          leave_members(G, k, ACTIVE)
          redis.call('ZADD', MTHROTTLED, fmt(now + wait), k)
          note_due(now + wait)
        else
          take_token(G, now)
          parked = false
        end
      end
    end
    if parked then
      if entry then redis.call('LPUSH', backlog(k), entry) end  -- pop_job left b as it was
    else
      local left = backlog_of(k) - 1
      set_backlog(k, left)
      local job = cjson.decode(job_val[record_field(id)])
      count_cost('wc', job, -1)
      -- The record stays as it is (see load_job): only a hand-back's mark
      -- goes, so that this release's message may start.
      if job.r then
        job.r = nil
        save_job(id, job)
      end
      local message, g_finish = send(id, k, G, job.c, job_val[payload_field(id)], job.t or tag, now, lease_s)
      if left > 0 then
        if eligible_count(G) >= 2 and not is_solo(G) then redis.call('ZADD', members(G), fmt(vt_of(k)), k) end
      else
        leave_members(G, k, ACTIVE)
      end
      if eligible_count(G) > 0 then redis.call('ZADD', ACTIVE, fmt(g_finish), G) end
      out[#out + 1] = id
      out[#out + 1] = message
      room = room - 1
    end
  end
  if #out > 0 then note_progress(now_arg) end
  return out
end

-- A job for a key with an empty backlog goes straight to the lane's queue
-- when no group is eligible and the window has room: what joining the
-- backlog, activating the key and releasing would do (its group would be
-- the only eligible one, and the key its only eligible key, so first),
-- without passing through the backlog and the sets and reading back the
-- job it has just stored, and most jobs of a lane that keeps up arrive so.
-- Nil, with nothing changed, when it cannot: the key or its group has a
-- rate (release checks token buckets) or is at its cap, the window is full
-- (the common case under load, told without the clock when it can be), a
-- delayed job or throttled key or group is due (release promotes it), or
-- another group is eligible (it may go first).
local function release_direct(id, k, G, cost, payload, job_tag, now_arg, lease_s, default_window, headroom)
  if key(k).rate or at_cap(k) or key(G).rate or at_cap(G) then return nil end
  if full_without_clock(default_window, headroom) then return nil end
  local now = clock(now_arg)
  if not nothing_due(now) then return nil end
  if room_in_window(now, default_window, headroom) <= 0 then return nil end
  if redis.call('ZCARD', ACTIVE) > 0 then return nil end
  note_progress(now_arg)
  return (send(id, k, G, cost, payload, job_tag or clock_tag(now), now, lease_s))
end

-- A key's or group's settings as a submit gives them ('' leaves one as it
-- is; cap and rate '0' remove a limit). A submit that repeats them (the
-- service sends the whole policy with every job) changes nothing. New
-- limits apply at once: one parked for its old cap or rate is let out and
-- becomes eligible again (`wake`), and the next release checks the new
-- ones. Returns true when `wake` made a group eligible.
local function apply_policy(k, new_weight, new_cap, new_rate, unpark_cap, parked_rate, wake)
  local policy = new_weight .. '|' .. new_cap .. '|' .. new_rate
  if policy == '||' or key(k).pol == policy then return false end
  -- Only one with a cap can be parked for it, and one with a rate for a token.
  local may_be_parked = key(k).cap or key(k).rate
  kset(k, 'pol', policy)
  if new_weight ~= '' then kset(k, 'w', new_weight) end
  if new_cap == '0' then
    kset(k, 'cap', false)
  elseif new_cap ~= '' then
    kset(k, 'cap', new_cap)
  end
  if new_rate == '0' then
    kset(k, 'rate', false)
    kset(k, 'bucket', false)
  elseif new_rate ~= '' then
    kset(k, 'rate', new_rate)
  end
  if may_be_parked and (new_cap ~= '' or new_rate ~= '') then
    local capped = unpark_cap(k)
    if redis.call('ZREM', parked_rate, k) > 0 or capped then return wake(k) end
  end
  return false
end

-- submit(job_id, key, cost, payload, weight, cap, rate, group, group_weight,
-- group_cap, group_rate, due, now, delay, tag): see submit.lua.
-- Returns 1 (accepted) or 0 (known already), and whether a group became
-- eligible: only then can a release that follows find anything new. Every
-- call that releases leaves the window full or no group eligible, so a job
-- joining a group that was eligible already waits for the next finish (or
-- the ticker's release, when the window grew meanwhile) like the jobs ahead
-- of it; skipping the release then saves reading the lane's numbers and
-- the clock. `direct`: a job for an idle key may be released at once
-- (`release_direct`, with release_lease_s, default_window and headroom from
-- a[16] to a[18], as submit_release has them); its message is the third
-- value returned. A key's group is the one its submits name (none: a group
-- of its own, whose weight is the key's); a key moves to another group only
-- while it has no job waiting or in flight, and starts there afresh.
local function submit(a, direct)
  local id, k, cost, payload = a[1], a[2], tonumber(a[3]), a[4]
  if string.sub(k, 1, 1) == '@' then error('a fairness key may not begin with @') end
  local first_tag = a[15] ~= '' and a[15] or nil
  local now
  if a[12] ~= '' or a[14] ~= '' then now = clock(a[13]) end
  local due = due_time(a[12], a[14], now)
  local delayed = due and due > now
  local woke = false

  -- Known in any state: nothing changes (one command, which also records the job).
  local record = cjson.encode({k = k, c = cost, s = delayed and 'delayed' or 'held', t = first_tag})
  if redis.call('HSETNX', H, record_field(id), record) == 0 then return 0, false end
  job_val[record_field(id)] = record  -- written: not a change to write again
  -- The key's and its group's fields and the lane's numbers in one read: a
  -- job for an idle key wants all three.
  local wanted = a[8] ~= '' and '@g:' .. a[8] or solo(k)
  prefetch(true, {k, wanted})
  local G = group_of(k)
  if G ~= wanted and backlog_of(k) == 0 and in_flight_of(k) == 0 then
    kset(k, 'g', a[8] ~= '' and wanted or false)
    kset(k, 'vt', false)
    G = wanted
  end

  local function wake_key(key_name) return activate(key_name) end
  local function wake_group(group)
    if eligible_count(group) > 0 then
      redis.call('ZADD', ACTIVE, fmt(group_start(group)), group)
      return true
    end
    return false
  end
  local function unpark_key(key_name) return unpark_capped(G, key_name) end
  local function unpark_group(group) return redis.call('SREM', CAPPED, group) == 1 end
  woke = apply_policy(k, a[5], a[6], a[7], unpark_key, MTHROTTLED, wake_key) or woke
  -- The settings are the named group's (whichever group k is in while it
  -- still has work in another); a group of its own weighs what its key
  -- does, and has no limits of its own.
  if wanted == solo(k) then
    woke = apply_policy(wanted, a[5], '0', '0', unpark_group, THROTTLED, wake_group) or woke
  else
    woke = apply_policy(wanted, a[9], a[10], a[11], unpark_group, THROTTLED, wake_group) or woke
  end

  jput(payload_field(id), payload)
  if delayed then
    redis.call('ZADD', DELAYED, fmt(due), id)
    note_due(due)
    return 1, woke
  end
  if direct and backlog_of(k) == 0 then
    local message = release_direct(id, k, G, cost, payload, first_tag, a[13], tonumber(a[16]),
                                   tonumber(a[17]), tonumber(a[18]))
    if message then
      -- Numbered as the entry it skipped would have been: the record is the
      -- same whichever way the job was released.
      local job = cjson.decode(record)
      job.g = (tonumber(M().sq) or 0) + 1
      mset('sq', string.format('%d', job.g))
      save_job(id, job)
      return 1, false, message
    end
  end
  local job = cjson.decode(record)
  local waiting = push_backlog(k, id, job, false)
  save_job(id, job)
  if waiting == 1 then
    -- The backlog was empty, so the key was not tracked (the invariants
    -- above `eligible_count`): it becomes eligible.
    woke = enter_members(G, k) or woke
  end
  return 1, woke
end

-- Released jobs whose message was lost -------------------------------------
-- A released job's message sits in the lane's queue until a worker takes it;
-- from then on only that worker process has it (kombu's acknowledgement
-- emulation is off on fair lanes: project/settings.py). A worker killed
-- with messages it had taken but not started (or that could not put them
-- back because Redis was down at its warm shutdown), or a finish that never
-- reached Redis, leaves the job in flight with nothing that will ever run
-- or finish it: its release lease (15 min on the cpu lane, as long as the
-- longest wait behind a running job) would hold a window slot until then.
-- So every worker process says which of the lane's jobs it holds (taken
-- from the queue, waiting for a pool slot or running: `holding`), and a
-- released job that is in no queue and held by no live worker process is
-- put back in seconds (`recover_orphans`).

-- The job id of a message in the lane's queue (its Celery task id,
-- "<job id>@<tag>", as worker.job_id_of reads it), or nil for a message that
-- is not a task of ours (or not JSON).
local function message_job_id(message)
  local ok, decoded = pcall(cjson.decode, message)
  if not ok or type(decoded) ~= 'table' or type(decoded.headers) ~= 'table' then return nil end
  local task_id = decoded.headers.id
  if type(task_id) ~= 'string' then return nil end
  local job_id = string.match(task_id, '^(.*)@')
  if job_id == nil or job_id == '' then return task_id end
  return job_id
end

-- The jobs whose messages wait in the lane's queue: id -> true. O(queue),
-- which holds at most the window's headroom plus what is on its way to a
-- worker.
local function queued_jobs()
  local queued = {}
  if QUEUE then
    for _, message in ipairs(redis.call('LRANGE', QUEUE, 0, -1)) do
      local id = message_job_id(message)
      if id then queued[id] = true end
    end
  end
  return queued
end

-- The live reports of `holding`: job id -> the token of the process that
-- holds it, and the time of the oldest live report (math.huge: none).
-- Reports older than ttl_s (their process stopped renewing: gone or
-- stalled) are dropped.
local function live_holdings(now, ttl_s)
  local holder, oldest, dead = {}, math.huge, {}
  local flat = redis.call('HGETALL', HOLDS)
  for i = 1, #flat, 2 do
    local report = cjson.decode(flat[i + 1])
    local at = tonumber(report.at)
    if at + ttl_s <= now then
      dead[#dead + 1] = flat[i]
    else
      oldest = math.min(oldest, at)
      for _, id in ipairs(report.ids) do holder[id] = flat[i] end
    end
  end
  if #dead > 0 then redis.call('HDEL', HOLDS, unpack(dead)) end
  return holder, oldest
end

-- Since when each released job has been found neither queued nor held: id ->
-- "<time> <lease deadline>". The deadline ties a mark to one release: a
-- job released again since (reap, a requeue) has a new deadline, and its old
-- mark says nothing about the new message.
local function missing_since()
  local marks, flat = {}, redis.call('HGETALL', MISSING)
  for i = 1, #flat, 2 do marks[flat[i]] = flat[i + 1] end
  return marks
end

local function mark_time(mark, deadline)
  if not mark then return nil end
  local at, of = string.match(mark, '^(%S+) (%S+)$')
  if of ~= deadline then return nil end
  return tonumber(at)
end

-- The jobs in flight, latest lease first, their records read in one HMGET.
local function jobs_in_flight()
  local ids = redis.call('ZREVRANGE', INFLIGHT, 0, -1, 'WITHSCORES')
  local fields = {}
  for i = 1, #ids, 2 do fields[#fields + 1] = record_field(ids[i]) end
  if #fields > 0 then prefetch(false, nil, fields) end
  return ids
end

-- Puts back the released jobs whose message is lost: in no queue and held by
-- no live worker process, at two looks `margin_s` apart. The first look
-- marks a job missing at `now`; a later look puts it back once every live
-- process has reported since that mark plus the margin: a process that took
-- the message before the mark lists it in every report after it, however
-- the report and the take interleave (the margin covers the moment between
-- taking a message and noting it, and the round trip). A process that
-- stopped reporting holds its jobs until its report is ttl_s old. Latest
-- release first, so that a key's jobs keep their order after the LPUSHes.
-- Still charged, as reap does. Returns the ids put back.
local function recover_orphans(now, ttl_s, margin_s)
  local holder, oldest = live_holdings(now, ttl_s)
  local queued, marks = queued_jobs(), missing_since()
  local keep, recovered = {}, {}
  local ids = jobs_in_flight()
  for i = 1, #ids, 2 do
    local id, deadline = ids[i], ids[i + 1]
    local job = load_job(id)
    -- 'held' in flight: released, not started (a running job's lease is renewed by heartbeats)
    if job and job.s == 'held' and not queued[id] and not holder[id] then
      local since = mark_time(marks[id], deadline)
      if since and oldest > since + margin_s then
        leave_flight(id, job)
        job.t = nil  -- its last release's tag is spent, as in reap
        put_back(id, job)
        recovered[#recovered + 1] = id
      else
        keep[#keep + 1] = id
        keep[#keep + 1] = fmt(since or now) .. ' ' .. deadline
      end
    end
  end
  redis.call('DEL', MISSING)
  if #keep > 0 then redis.call('HSET', MISSING, unpack(keep)) end
  return recovered
end
