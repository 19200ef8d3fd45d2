-- Compare-and-delete: only the holder's own value is ever deleted. Like acquire.lua, the common
-- case (nobody queued) ends before queue.lua's functions are defined; release_queued.lua, after
-- them, wakes the head of the queue.
-- KEYS[1] lock, KEYS[2] queue, KEYS[3] ticket expiries, KEYS[4] history
-- ARGV[1] our holder value, ARGV[2] ms to keep (--min-hold), ARGV[3] wake channel, ARGV[4] the
-- publish command (see `wake_head`), ARGV[5..] the run's history entry (see `note`), written
-- whether or not the key is still ours
-- Returns 1 deleted | 2 kept for ARGV[2] ms | 0 not ours (nothing else touched)
-- A key of another type is simply not ours.
local ours = get_or_wrongtype(KEYS[1]) == ARGV[1]
-- The history's expiry moved with the run's acquire (`next_fence`); a lost run refreshes it.
note(KEYS[4], 5, not ours, not ours)
if not ours then return 0 end
local keep = tonumber(ARGV[2])
if keep > 0 then
  redis.call('PEXPIRE', KEYS[1], keep)
  return 2
end
redis.call('DEL', KEYS[1])
-- Nobody queued: nobody to wake (the common case ends here).
if redis.call('EXISTS', KEYS[2], KEYS[3]) == 0 then return 1 end
