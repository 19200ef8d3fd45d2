-- Acquire an exclusive lock in one round trip.
-- KEYS[1] lock key, KEYS[2] fencing counter (never expires, same cluster slot)
-- ARGV[1] holder value ("<token> host=... pid=... started=..."), ARGV[2] ttl in ms
-- Returns {1, fence} acquired | {0, pttl, holder} held elsewhere | {-1, type} key misused
local kind = redis.call('TYPE', KEYS[1]).ok
if kind == 'none' then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return {1, redis.call('INCR', KEYS[2])}
elseif kind ~= 'string' then
  return {-1, kind}
end
local current = redis.call('GET', KEYS[1])
if current == ARGV[1] then
  -- Our own earlier attempt succeeded but its reply was lost: still ours. A fresh fence keeps
  -- the counter strictly increasing; the number we never received was never used.
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, redis.call('INCR', KEYS[2])}
end
return {0, redis.call('PTTL', KEYS[1]), current}
