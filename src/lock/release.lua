-- Compare-and-delete (after the queue prelude): only the holder's own value is ever deleted.
-- KEYS[1] lock, KEYS[2] queue, KEYS[3] ticket expiries
-- ARGV[1] our holder value, ARGV[2] ms to keep (--min-hold), ARGV[3] wake channel
-- Returns 1 deleted | 2 kept for ARGV[2] ms | 0 not ours (nothing touched)
if redis.call('TYPE', KEYS[1]).ok ~= 'string' then return 0 end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local keep = tonumber(ARGV[2])
if keep > 0 then
  redis.call('PEXPIRE', KEYS[1], keep)
  return 2
end
redis.call('DEL', KEYS[1])
-- A queue spoiled by hand is left alone (its waiters are told so by their acquire).
if bad_queue(KEYS[2], KEYS[3]) then return 1 end
-- Wake the head of the queue only. A hint: it re-checks with acquire, so a lost message costs
-- latency (until its next ticket renewal), never safety.
prune_queue(KEYS[2], KEYS[3], now_ms())
wake_head(KEYS[2], ARGV[3])
return 1
