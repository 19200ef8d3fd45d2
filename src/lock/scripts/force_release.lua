-- `lockrun release --force`: delete a lock (with its shared holders) or a whole semaphore
-- whoever holds it, record it in the key's history, and wake the head of the queue (after
-- prelude.lua and queue.lua).
-- KEYS[1] lock, KEYS[2] queue, KEYS[3] ticket expiries, KEYS[4] fencing counter, KEYS[5]
-- history, KEYS[6] the lock's shared holders (`--shared`)
-- ARGV[1] wake channel, ARGV[2] the publish command (see `wake_head`), ARGV[3..] the history
-- entry (see `note`)
-- Returns {type, fence or '', the deleted holder values...}; type 'none' (nothing deleted) or
-- another type than a lock's (nothing touched: not lockrun's) leaves everything as it was.
-- Type 'shared': the lock was held in shared mode only; its live shared holders are listed.
local kind = redis.call('TYPE', KEYS[1]).ok
local fence = ''
if redis.call('TYPE', KEYS[4]).ok == 'string' then fence = redis.call('GET', KEYS[4]) end
-- The shared holders' set is lockrun's own helper key; one spoiled by hand is left alone.
local shared = KEYS[6] and redis.call('TYPE', KEYS[6]).ok == 'zset' and lockrun_zset(KEYS[6])
if kind == 'none' and shared then kind = 'shared' end
if kind ~= 'string' and kind ~= 'zset' and kind ~= 'shared' then return {kind, fence} end
-- Only lockrun's own lock or semaphore is deleted, never a value of the same name it did not
-- write (a configuration key, a leaderboard).
if kind == 'string' and not holder_shaped(redis.call('GET', KEYS[1])) then
  return {'foreign-string', fence}
end
if kind == 'zset' and not lockrun_zset(KEYS[1]) then return {'foreign-zset', fence} end
local out = {kind, fence}
if kind == 'string' then
  table.insert(out, redis.call('GET', KEYS[1]))
elseif kind == 'zset' then
  for _, member in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], now_ms(), '+inf')) do
    table.insert(out, member)
  end
end
if shared then
  for _, member in ipairs(redis.call('ZRANGEBYSCORE', KEYS[6], now_ms(), '+inf')) do
    table.insert(out, member)
  end
  redis.call('DEL', KEYS[6])
end
redis.call('DEL', KEYS[1])
-- Always recorded (an operator's deletion is audited even for a key whose runs record nothing),
-- and trimmed only at the largest cap a run may ask for (the caller's ARGV[3]): the runs' own
-- cap is theirs to apply.
note(KEYS[5], 3, false, true)
if not bad_queue(KEYS[2], KEYS[3]) then
  prune_queue(KEYS[2], KEYS[3], now_ms())
  wake_head(KEYS[2], ARGV[1], ARGV[2])
end
return out
