-- What only the less common paths need, after prelude.lua (and after the fast path of acquire.lua
-- and release.lua, which returns before these functions are created: each one costs the server
-- work on every call): the clock in milliseconds, a skipped run's history entry, and the waiter
-- queue.

local function now_ms()
  return math.floor(now_us() / 1000)
end

-- The entry of an attempt that ends its run without the lock (held, not waiting), composed here
-- from the holder value (ARGV[1], "<public id> host=<host> pid=<pid> ...", which lockrun writes)
-- so that the acquire, which mostly succeeds, does not carry a whole entry in its arguments. The
-- value is read as HolderValue::parse (src/lock/holder.rs) reads it.
-- ARGV[at] is the cap (0: record nothing).
local function note_skipped(h, at)
  local cap = tonumber(ARGV[at])
  if not cap or cap <= 0 then return end
  local id, host, pid = string.match(ARGV[1], '^(%S+) host=(%S*) pid=(%d+)')
  if not id then return end
  append(h, cap, {'outcome', 'skipped', 'host', host, 'pid', pid, 'id', id, 'duration_ms', '0'}, true)
end

-- Waiters (lockruns with --wait) queue in arrival order in a sorted set Q (score = arrival time,
-- member = the waiter's public id, never its secret token: any client can read the queue). Each
-- entry is a ticket that expires (sorted set E, score = expiry) unless its waiter renews it, so
-- a waiter that dies leaves the queue by itself within one ticket TTL: no queue can deadlock
-- behind a dead waiter. A release wakes only the head of the queue (pub/sub, payload = its id),
-- so a release costs one attempt, not one per waiter. All times come from the server's clock
-- (TIME); clients' clocks are never compared.
--
-- These keys are lockrun's own (no lock name can reach them); only a hand edit can spoil them.
-- Returns the first of the queue keys that is not a sorted set (or absent), else nil.
local function bad_queue(q, e)
  for _, k in ipairs({q, e}) do
    local t = redis.call('TYPE', k).ok
    if t ~= 'none' and t ~= 'zset' then return k end
  end
end

-- The checks an acquire (lock or semaphore) makes before its first write, since Redis never
-- rolls a script back: the key (KEYS[1]) is absent or of type `want`, the fencing counter
-- (KEYS[2]) and the queue keys (KEYS[3], KEYS[4]) are sound. Returns the reply that refuses
-- ({-1, type} or {-2, spoiled helper key}), or nil, the key's type, the counter and the
-- server clock in µs and in ms.
local function preflight(want)
  local kind = redis.call('TYPE', KEYS[1]).ok
  if kind == 'zset' and not lockrun_zset(KEYS[1]) then return {-1, 'foreign-zset'} end
  if kind ~= 'none' and kind ~= want then return {-1, kind} end
  local counter = read_fence(KEYS[2])
  if not counter then return {-2, KEYS[2]} end
  local bad = bad_queue(KEYS[3], KEYS[4])
  if bad then return {-2, bad} end
  local us = now_us()
  return nil, kind, counter, us, math.floor(us / 1000)
end

local function prune_queue(q, e, now)
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', e, '-inf', now)) do
    redis.call('ZREM', q, id)
    redis.call('ZREM', e, id)
  end
end

-- Position in the queue; an id not queued stands behind everyone.
local function rank(q, id)
  local r = redis.call('ZRANK', q, id)
  if r then return r end
  return redis.call('ZCARD', q)
end

local function enqueue(q, e, id, now, ticket)
  redis.call('ZADD', q, 'NX', now, id)
  redis.call('ZADD', e, now + ticket, id)
  -- The queue keys last as long as the longest ticket in them, never less: tickets differ in
  -- length (a standby's lasts its TTL and more, a waiter's 3 s).
  for _, k in ipairs({q, e}) do
    if redis.call('PTTL', k) < ticket then redis.call('PEXPIRE', k, ticket) end
  end
end

local function dequeue(q, e, id)
  redis.call('ZREM', q, id)
  redis.call('ZREM', e, id)
end

-- `publish`: the caller's argument, PUBLISH or (on a Cluster, where the channel shares the
-- lock's slot) SPUBLISH, so that the script's text is the same everywhere.
local function wake_head(q, channel, publish)
  local head = redis.call('ZRANGE', q, 0, 0)
  if head[1] then redis.call(publish, channel, head[1]) end
end

-- The shared holders of a lock (`--shared`): a sorted set beside it (member = holder value,
-- score = lease expiry in server ms), pruned of ended leases here. Returns the earliest live
-- lease as {holder, expiry}, false when there is none, or nil when the key is not such a set
-- (spoiled by hand: a lockrun helper key, refused before any write).
local function live_shared(s, now)
  local t = redis.call('TYPE', s).ok
  if t == 'none' then return false end
  if t ~= 'zset' or not lockrun_zset(s) then return nil end
  redis.call('ZREMRANGEBYSCORE', s, '-inf', now)
  local first = redis.call('ZRANGE', s, 0, 0, 'WITHSCORES')
  if first[1] then return first end
  return false
end

-- The opening of a lock's queued acquire (acquire_queued.lua, shared_acquire.lua): `preflight`,
-- its shared holders at KEYS[6] sound, the queue pruned. Returns the reply that refuses, or nil,
-- the counter, the server clock in µs and in ms, the live shared holders (see `live_shared`)
-- and the exclusive holder's value (false: none).
local function lock_preflight()
  local refused, kind, counter, us, now = preflight('string')
  if refused then return refused end
  local shared = live_shared(KEYS[6], now)
  if shared == nil then return {-2, KEYS[6]} end
  prune_queue(KEYS[3], KEYS[4], now)
  local current = false
  if kind == 'string' then current = redis.call('GET', KEYS[1]) end
  return nil, counter, us, now, shared, current
end

-- The answer of a lock's acquire (acquire.lua, shared_acquire.lua) that does not get it now:
-- queued while waiting (ARGV[4] ticket ms), else its run ends skipped (the history cap at
-- ARGV[cap_at]). The reply names what holds the lock: its exclusive holder (`current`), else
-- the earliest of its shared holders (`shared`: {holder, expiry}, or false), else a waiter
-- the free lock is promised to.
local function not_now(current, shared, now, cap_at)
  local ticket = tonumber(ARGV[4])
  if ticket > 0 then enqueue(KEYS[3], KEYS[4], ARGV[3], now, ticket) else note_skipped(KEYS[5], cap_at) end
  local place = rank(KEYS[3], ARGV[3])
  if current then return {0, redis.call('PTTL', KEYS[1]), current, place} end
  -- Held shared: an exclusive attempt waits for every one of them, a shared one for the waiter
  -- ahead of it; the earliest lease to end says how long at least.
  if shared then return {0, math.max(0, tonumber(shared[2]) - now), shared[1], place} end
  -- Names no waiter: this text ends up in log lines.
  return {0, -2, 'reserved for a queued waiter', place}
end

-- Whether KEYS[1] is held in shared mode right now (nothing written): a semaphore (`--limit`)
-- or a tick (`--standby`) must not be taken beside shared holders of the same name.
local function held_shared(s, now)
  return s ~= nil and redis.call('TYPE', s).ok == 'zset' and redis.call('ZCOUNT', s, now, '+inf') > 0
end
