-- Acquire an exclusive lock in one round trip (after prelude.lua and queue.lua).
-- KEYS[1] lock, KEYS[2] fencing counter (never expires), KEYS[3] queue, KEYS[4] ticket expiries,
-- KEYS[5] history
-- ARGV[1] holder value "<public id> host=... pid=... started=... program=...", ARGV[2] ttl ms,
-- ARGV[3] public id, ARGV[4] ticket ms (0: not waiting, do not queue), ARGV[5] history cap: an
-- attempt that is not waiting and finds the lock held ends its run, recorded as skipped (see
-- `note_skipped`)
-- Returns {1, fence} acquired | {0, pttl, holder, rank} not now | {-1, type} key misused |
-- {-2, helper key} a helper key spoiled by hand (pttl -2: the lock is free but promised to the
-- head of the queue). Nothing is written before every check has passed.
-- The common case first, in as few commands as it can be done safely: nobody queued (neither
-- queue key exists), the fencing counter sound, the key free. SET NX is the check and the
-- write at once; nothing is written before the counter has been read and checked.
if redis.call('EXISTS', KEYS[3], KEYS[4]) == 0 then
  local counter = read_fence(KEYS[2])
  if counter and redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
    return {1, next_fence(KEYS[2], counter, now_us(), KEYS[5])}
  end
end
-- Everything else: held (maybe by our own earlier attempt), queued waiters, spoiled keys.
local kind = redis.call('TYPE', KEYS[1]).ok
if kind ~= 'none' and kind ~= 'string' then return {-1, kind} end
local counter, spoiled = check_helpers(KEYS[2], KEYS[3], KEYS[4])
if not counter then return {-2, spoiled} end
local us = now_us()
local now = math.floor(us / 1000)
prune_queue(KEYS[3], KEYS[4], now)
local current = false
if kind == 'string' then current = redis.call('GET', KEYS[1]) end
if current == ARGV[1] then
  -- Our own earlier attempt succeeded but its reply was lost: still ours. A fresh fence keeps
  -- numbers strictly increasing; the number we never received was never used.
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  dequeue(KEYS[3], KEYS[4], ARGV[3])
  return {1, next_fence(KEYS[2], counter, us, KEYS[5])}
end
-- Free, and nobody queued ahead of us: no barging past waiters, so none starves.
if not current and rank(KEYS[3], ARGV[3]) == 0 then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  dequeue(KEYS[3], KEYS[4], ARGV[3])
  return {1, next_fence(KEYS[2], counter, us, KEYS[5])}
end
local ticket = tonumber(ARGV[4])
if ticket > 0 then enqueue(KEYS[3], KEYS[4], ARGV[3], now, ticket) else note_skipped(KEYS[5], 5) end
if current then
  return {0, redis.call('PTTL', KEYS[1]), current, rank(KEYS[3], ARGV[3])}
end
-- Names no waiter: this text ends up in log lines.
return {0, -2, 'reserved for a queued waiter', rank(KEYS[3], ARGV[3])}
