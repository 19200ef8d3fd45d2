-- Take one of ARGV[5] slots of a semaphore in one round trip (after prelude.lua and queue.lua).
-- The key is a sorted set: member = holder value, score = lease expiry in ms of the server's
-- clock (TIME), so no client clock is ever compared with another.
-- KEYS[1] semaphore, KEYS[2] fencing counter, KEYS[3] queue, KEYS[4] ticket expiries
-- KEYS[6] the shared holders of a lock of the same name (`--shared`): a semaphore is never
-- taken beside them ({-1, 'shared'})
-- ARGV[1] holder value, ARGV[2] ttl ms, ARGV[3] public id, ARGV[4] ticket ms, ARGV[5] limit,
-- ARGV[6] wake channel, ARGV[7] the publish command (see `wake_head`), ARGV[8] history cap,
-- for an attempt that ends the run (KEYS[5] history; see `note_skipped`)
-- Returns {1, fence, server clock in µs} | {0, pttl of the earliest holder, that holder, rank} | {-1, type} |
-- {-2, helper key}. Nothing is written before every check has passed.
local refused, kind, counter, us, now = preflight('zset')
if refused then return refused end
if held_shared(KEYS[6], now) then return {-1, 'shared'} end
local ttl = tonumber(ARGV[2])
-- Holders that died without releasing stop counting the moment their lease ends.
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
prune_queue(KEYS[3], KEYS[4], now)
local free = tonumber(ARGV[5]) - redis.call('ZCARD', KEYS[1])
local mine = redis.call('ZSCORE', KEYS[1], ARGV[1])
if mine or rank(KEYS[3], ARGV[3]) < free then
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
  -- The set itself expires with its last lease, so an abandoned semaphore leaves nothing.
  local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  redis.call('PEXPIRE', KEYS[1], math.max(1, tonumber(last[2]) - now))
  dequeue(KEYS[3], KEYS[4], ARGV[3])
  -- More slots free: the next waiter need not wait for a release.
  if not mine and free > 1 then wake_head(KEYS[3], ARGV[6], ARGV[7]) end
  return {1, next_fence(KEYS[2], counter, us, KEYS[5]), us}
end
local ticket = tonumber(ARGV[4])
if ticket > 0 then enqueue(KEYS[3], KEYS[4], ARGV[3], now, ticket) else note_skipped(KEYS[5], 8) end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if first[1] then
  return {0, math.max(0, tonumber(first[2]) - now), first[1], rank(KEYS[3], ARGV[3])}
end
return {0, -2, 'slots reserved for queued waiters', rank(KEYS[3], ARGV[3])}
