-- Does the holder whose token is ARGV[1] hold KEYS[1]? (reentrancy check)
-- A holder value is "<token> host=...", so a token matches a value's first word.
local prefix = ARGV[1] .. ' '
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
