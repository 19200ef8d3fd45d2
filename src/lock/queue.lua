-- Shared prelude of the acquire, release and leave scripts: the waiter queue.
--
-- Waiters (lockruns with --wait) queue in arrival order in a sorted set Q (score = arrival time,
-- member = token). Each entry is a ticket that expires (sorted set E, score = expiry) unless its
-- waiter renews it, so a waiter that dies leaves the queue by itself within one ticket TTL: no
-- queue can deadlock behind a dead waiter. A release wakes only the head of the queue (pub/sub,
-- payload = its token), so a release costs one attempt, not one per waiter. All times come from
-- the server's clock (TIME); clients' clocks are never compared.
redis.replicate_commands()

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function prune_queue(q, e, now)
  for _, token in ipairs(redis.call('ZRANGEBYSCORE', e, '-inf', now)) do
    redis.call('ZREM', q, token)
    redis.call('ZREM', e, token)
  end
end

-- Position in the queue; a token not queued stands behind everyone.
local function rank(q, token)
  local r = redis.call('ZRANK', q, token)
  if r then return r end
  return redis.call('ZCARD', q)
end

local function enqueue(q, e, token, now, ticket)
  redis.call('ZADD', q, 'NX', now, token)
  redis.call('ZADD', e, now + ticket, token)
  -- Every ticket ends within `ticket` ms from now, so the queue keys never outlive them.
  redis.call('PEXPIRE', q, ticket)
  redis.call('PEXPIRE', e, ticket)
end

local function dequeue(q, e, token)
  redis.call('ZREM', q, token)
  redis.call('ZREM', e, token)
end

local function wake_head(q, channel)
  local head = redis.call('ZRANGE', q, 0, 0)
  if head[1] then redis.call('PUBLISH', channel, head[1]) end
end
