-- Take a lock in shared mode (`--shared`) in one round trip (after prelude.lua and queue.lua):
-- any number of shared holders at once, none while the lock is held exclusively. The lock key
-- itself stays the exclusive holder's string, so exclusive runs keep their own scripts; the
-- shared holders live in a sorted set beside it (see `live_shared`), which acquire.lua checks.
-- Fairness: one queue for both modes. A shared attempt joins the holders only when nobody is
-- queued ahead of it and the lock is not held exclusively, so an exclusive waiter at the head
-- of the queue is never overtaken by shared runs arriving after it; shared waiters at the head
-- go in together, each one waking the next.
-- KEYS[1] lock, KEYS[2] fencing counter, KEYS[3] queue, KEYS[4] ticket expiries, KEYS[5]
-- history, KEYS[6] shared holders
-- ARGV[1] holder value, ARGV[2] ttl ms, ARGV[3] public id, ARGV[4] ticket ms (0: not waiting),
-- ARGV[5] wake channel, ARGV[6] the publish command (see `wake_head`), ARGV[7] history cap for
-- an attempt that ends the run (see `note_skipped`)
-- Returns as acquire.lua. Nothing is written before every check has passed.
local refused, counter, us, now, shared, current = lock_preflight()
if refused then return refused end
-- Ours already (an earlier attempt whose reply was lost), or free of an exclusive holder with
-- nobody queued ahead.
local mine = shared and redis.call('ZSCORE', KEYS[6], ARGV[1])
if mine or (not current and rank(KEYS[3], ARGV[3]) == 0) then
  redis.call('ZADD', KEYS[6], now + tonumber(ARGV[2]), ARGV[1])
  -- The set expires with its last lease, so an abandoned one leaves nothing.
  local last = redis.call('ZRANGE', KEYS[6], -1, -1, 'WITHSCORES')
  redis.call('PEXPIRE', KEYS[6], math.max(1, tonumber(last[2]) - now))
  dequeue(KEYS[3], KEYS[4], ARGV[3])
  -- The next waiter may be shared too: it need not wait for a release (an exclusive one
  -- finds us and waits on).
  if not mine then wake_head(KEYS[3], ARGV[5], ARGV[6]) end
  return {1, next_fence(KEYS[2], counter, us, KEYS[5]), us}
end
return not_now(current, shared, now, 7)
