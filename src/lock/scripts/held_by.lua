-- Does the holder whose public id is ARGV[1] hold KEYS[1]? (reentrancy check) 1: it holds the
-- lock (or a semaphore's slot); 2: it is one of the shared holders in KEYS[2] (`--shared`);
-- 0: neither.
-- A holder value is "<id> host=..." (HolderValue::parse, src/lock/holder.rs), so an id matches a
-- value's first word. The caller derives the id from the secret token it was given; the token
-- itself is never sent, since MONITOR and SLOWLOG show a script's arguments to other clients. Presenting an id read from Redis or a log
-- as the token fails: the caller hashes it again.
local prefix = ARGV[1] .. ' '
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function in_zset(k)
  for _, member in ipairs(redis.call('ZRANGEBYSCORE', k, now, '+inf')) do
    if string.sub(member, 1, #prefix) == prefix then return true end
  end
  return false
end
local kind = redis.call('TYPE', KEYS[1]).ok
if kind == 'string' then
  local v = redis.call('GET', KEYS[1])
  if string.sub(v, 1, #prefix) == prefix then return 1 end
elseif kind == 'zset' then
  if in_zset(KEYS[1]) then return 1 end
end
if KEYS[2] and redis.call('TYPE', KEYS[2]).ok == 'zset' and in_zset(KEYS[2]) then return 2 end
return 0
