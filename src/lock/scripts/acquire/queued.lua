-- The rest of acquire.lua, after queue.lua: held, queued waiters, spoiled keys.
local refused, counter, us, now, shared, current = lock_preflight()
if refused then return refused end
if current == ARGV[1] then
  -- Our own earlier attempt succeeded but its reply was lost: still ours. A fresh fence keeps
  -- numbers strictly increasing; the number we never received was never used.
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  dequeue(KEYS[3], KEYS[4], ARGV[3])
  return {1, next_fence(KEYS[2], counter, us, KEYS[5]), us}
end
-- Free, no shared holder, and nobody queued ahead of us: no barging past waiters, so none
-- starves.
if not current and not shared and rank(KEYS[3], ARGV[3]) == 0 then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  dequeue(KEYS[3], KEYS[4], ARGV[3])
  return {1, next_fence(KEYS[2], counter, us, KEYS[5]), us}
end
return not_now(current, shared, now, 5)
