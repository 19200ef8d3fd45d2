-- Give back our slot (or, with --min-hold, keep it ARGV[2] ms more). After prelude.lua and queue.lua.
-- KEYS[1] semaphore, KEYS[2] queue, KEYS[3] ticket expiries, KEYS[4] history
-- ARGV[1] our holder value, ARGV[2] ms to keep, ARGV[3] wake channel, ARGV[4] the publish
-- command (see `wake_head`), ARGV[5..] the run's history entry (see `note`)
-- Returns 1 released | 2 kept | 0 not ours
local now = now_ms()
local ours = redis.call('TYPE', KEYS[1]).ok == 'zset' and redis.call('ZSCORE', KEYS[1], ARGV[1])
-- A slot whose lease ended is not ours, whether or not it was pruned yet.
ours = ours and tonumber(ours) > now
note(KEYS[4], 5, not ours, not ours)
if not ours then
  -- Tidy up expired slots, but only of lockrun's own semaphore: a sorted set of the same name
  -- that is not one is the user's (its scores are no leases).
  if redis.call('TYPE', KEYS[1]).ok == 'zset' and lockrun_zset(KEYS[1]) then
    redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  end
  return 0
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local keep = tonumber(ARGV[2])
if keep > 0 then
  redis.call('ZADD', KEYS[1], 'XX', now + keep, ARGV[1])
  local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  redis.call('PEXPIRE', KEYS[1], math.max(1, tonumber(last[2]) - now))
  return 2
end
redis.call('ZREM', KEYS[1], ARGV[1])
-- A queue spoiled by hand is left alone (its waiters are told so by their acquire).
if bad_queue(KEYS[2], KEYS[3]) then return 1 end
prune_queue(KEYS[2], KEYS[3], now)
wake_head(KEYS[2], ARGV[3], ARGV[4])
return 1
