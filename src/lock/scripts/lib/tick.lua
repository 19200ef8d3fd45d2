-- The tick record of `--standby` (KEYS[tick]): which tick of a `--every` job is under way and
-- whether it completed, written by the acquire that starts the tick and by each release, read
-- by every host that fires for that tick. One string,
-- `<open|done> <tick start, server ms> <attempt> <holder value of the attempt under way, or empty>`,
-- that expires when the tick does (its hold), so the next tick starts without it.
-- After prelude.lua and queue.lua.

local function read_tick(t)
  local v = get_or_wrongtype(t)
  if type(v) ~= 'string' then return nil end
  local state, start, attempt, holder = string.match(v, '^(%a+) (%d+) (%d+) ?(.*)$')
  if state ~= 'open' and state ~= 'done' then return nil end
  return {state = state, start = start, attempt = tonumber(attempt), holder = holder}
end

-- Rewrites the record, keeping what is left of its expiry (KEEPTTL is not in every server
-- lockrun supports). A record that is about to expire is left to expire.
local function write_tick(t, tick)
  local left = redis.call('PTTL', t)
  if left <= 0 then return end
  local v = tick.state .. ' ' .. tick.start .. ' ' .. string.format('%d', tick.attempt) .. ' ' .. tick.holder
  redis.call('SET', t, v, 'PX', left)
end
