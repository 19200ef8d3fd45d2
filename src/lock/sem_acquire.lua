-- Take one of ARGV[3] slots of a semaphore in one round trip.
-- The key is a sorted set: member = holder value, score = lease expiry in ms of the *server's*
-- clock (TIME), so no client clock is ever compared with another.
-- KEYS[1] semaphore key, KEYS[2] fencing counter
-- ARGV[1] holder value, ARGV[2] ttl in ms, ARGV[3] limit
-- Returns {1, fence} | {0, pttl of the earliest holder, that holder} | {-1, type}
local kind = redis.call('TYPE', KEYS[1]).ok
if kind ~= 'none' and kind ~= 'zset' then return {-1, kind} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
-- Holders that died without releasing stop counting the moment their lease ends.
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local mine = redis.call('ZSCORE', KEYS[1], ARGV[1])
if mine or redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[3]) then
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
  -- The set itself expires with its last lease, so an abandoned semaphore leaves nothing.
  local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  redis.call('PEXPIRE', KEYS[1], math.max(1, tonumber(last[2]) - now))
  return {1, redis.call('INCR', KEYS[2])}
end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {0, math.max(0, tonumber(first[2]) - now), first[1]}
