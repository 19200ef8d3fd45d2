-- What `lockrun status` and `lockrun list` show about one lock, read in one round trip; nothing
-- is written. KEYS[1] lock, KEYS[2] fencing counter, KEYS[3] queue, KEYS[4] ticket expiries,
-- KEYS[5] the tick record of `--standby` (see tick.lua), KEYS[6] the shared holders of
-- `--shared` (see shared_acquire.lua)
-- Returns {type, fence or '', live waiters, next waiter's id or '', ms since it queued, the
-- server's clock in µs, the tick record or '', ms left of it, then holder value and ms left,
-- for each holder (one for a lock, each live slot of a semaphore)}. A lock held in shared mode
-- (no exclusive holder, live shared ones) is of type 'shared', its holders the shared ones.
-- The clock tells how long a lock has been held: its fence is the server's clock at the
-- acquisition (see next_fence).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local now_us = string.format('%.0f', tonumber(t[1]) * 1000000 + tonumber(t[2]))
local kind = redis.call('TYPE', KEYS[1]).ok
local shared = KEYS[6]
if kind == 'none' and redis.call('TYPE', shared).ok == 'zset'
  and redis.call('ZCOUNT', shared, now, '+inf') > 0 then
  kind = 'shared'
end
local fence = ''
if redis.call('TYPE', KEYS[2]).ok == 'string' then fence = redis.call('GET', KEYS[2]) end
-- Waiters whose ticket is still valid (expired ones are pruned by the next acquire only).
local waiters, next_id, since = 0, '', 0
if redis.call('TYPE', KEYS[3]).ok == 'zset' and redis.call('TYPE', KEYS[4]).ok == 'zset' then
  waiters = redis.call('ZCOUNT', KEYS[4], now, '+inf')
  local queued = redis.call('ZRANGE', KEYS[3], 0, 99, 'WITHSCORES')
  for i = 1, #queued, 2 do
    local expiry = redis.call('ZSCORE', KEYS[4], queued[i])
    if expiry and tonumber(expiry) >= now then
      next_id, since = queued[i], now - tonumber(queued[i + 1])
      break
    end
  end
end
local tick = ''
if redis.call('TYPE', KEYS[5]).ok == 'string' then tick = redis.call('GET', KEYS[5]) end
local out = {kind, fence, waiters, next_id, since, now_us, tick, redis.call('PTTL', KEYS[5])}
if kind == 'string' then
  table.insert(out, redis.call('GET', KEYS[1]))
  table.insert(out, redis.call('PTTL', KEYS[1]))
elseif kind == 'zset' or kind == 'shared' then
  local set = KEYS[1]
  if kind == 'shared' then set = shared end
  local live = redis.call('ZRANGEBYSCORE', set, now, '+inf', 'WITHSCORES')
  for i = 1, #live, 2 do
    table.insert(out, live[i])
    table.insert(out, tonumber(live[i + 1]) - now)
  end
end
return out
