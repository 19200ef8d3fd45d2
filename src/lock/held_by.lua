-- Does the holder whose secret token is ARGV[1] hold KEYS[1]? (reentrancy check)
-- A holder value is "<id> host=...", the id being the SHA-1 of the token. The id is public (GET,
-- ZRANGE, logs of older versions), so it is derived here from the token presented: only the
-- job that was given the token can pass, not whoever read the id.
local prefix = redis.sha1hex(ARGV[1]) .. ' '
local kind = redis.call('TYPE', KEYS[1]).ok
if kind == 'string' then
  local v = redis.call('GET', KEYS[1])
  if string.sub(v, 1, #prefix) == prefix then return 1 end
elseif kind == 'zset' then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  for _, member in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], now, '+inf')) do
    if string.sub(member, 1, #prefix) == prefix then return 1 end
  end
end
return 0
