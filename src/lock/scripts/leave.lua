-- A waiter gives up (timeout, signal): leave the queue at once instead of blocking it until the
-- ticket expires, and if the lock is free, pass the turn on. After prelude.lua and queue.lua.
-- KEYS[1] lock or semaphore, KEYS[2] queue, KEYS[3] ticket expiries, KEYS[4] history
-- ARGV[1] public id, ARGV[2] limit (0: plain lock), ARGV[3] wake channel, ARGV[4] the publish
-- command (see `wake_head`), ARGV[5..] the run's history entry (see `note`)
note(KEYS[4], 5, false, true)
local bad = bad_queue(KEYS[2], KEYS[3])
if bad then return {-2, bad} end
dequeue(KEYS[2], KEYS[3], ARGV[1])
local limit = tonumber(ARGV[2])
local busy
if limit == 0 then
  busy = redis.call('EXISTS', KEYS[1]) == 1
else
  busy = redis.call('TYPE', KEYS[1]).ok == 'zset' and redis.call('ZCOUNT', KEYS[1], now_ms(), '+inf') >= limit
end
if not busy then wake_head(KEYS[2], ARGV[3], ARGV[4]) end
return 1
