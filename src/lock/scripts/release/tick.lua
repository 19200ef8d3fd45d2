-- Release for one tick of a `--every` job with `--standby`, after prelude.lua, queue.lua and
-- tick.lua: compare-and-delete as release.lua, then the tick's record says whether the tick
-- completed. Completed: it stays `done` until the tick ends, so no standby and no host firing
-- late runs it again, and every standby is woken to end its run. Not completed: handed on,
-- every standby woken, the first to come takes it over (there are few: `--standbys`).
-- KEYS[1] lock, KEYS[2] queue, KEYS[3] ticket expiries, KEYS[4] history, KEYS[5] tick record
-- ARGV[1] our holder value, ARGV[2] 1: the tick completed, 0: hand it on, ARGV[3] wake channel,
-- ARGV[4] the publish command (see `wake_head`), ARGV[5..] the run's history entry (see `note`)
-- Returns 1 deleted | 0 not ours (nothing else touched).
local ours = get_or_wrongtype(KEYS[1]) == ARGV[1]
note(KEYS[4], 5, not ours, not ours)
if not ours then return 0 end
redis.call('DEL', KEYS[1])
local done = ARGV[2] == '1'
local tick = read_tick(KEYS[5])
if tick and tick.holder == ARGV[1] then
  if done then tick.state = 'done' end
  tick.holder = ''
  write_tick(KEYS[5], tick)
end
if redis.call('EXISTS', KEYS[2], KEYS[3]) == 0 then return 1 end
if bad_queue(KEYS[2], KEYS[3]) then return 1 end
prune_queue(KEYS[2], KEYS[3], now_ms())
for _, id in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
  redis.call(ARGV[4], ARGV[3], id)
end
return 1
