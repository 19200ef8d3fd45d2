-- Acquire for one tick of a `--every` job with `--standby`, after prelude.lua, queue.lua and
-- tick.lua. The first attempt of a tick takes the lock and opens the tick's record; the next
-- ones, up to ARGV[8] of them at a time, stand by in the waiter queue while the lock is held,
-- take the lock over (the next attempt of the tick) when the holder is gone before the tick
-- completed, and end their run when it completed or the tick is over. Attempts beyond those
-- standbys end their run skipped at once, as without --standby: the cost of a tick does not
-- grow with the hosts that fire for it.
-- KEYS[1] lock, KEYS[2] fencing counter, KEYS[3] queue, KEYS[4] ticket expiries, KEYS[5]
-- history, KEYS[6] tick record, KEYS[7] the shared holders (`--shared`): a tick is never taken
-- beside them ({-1, 'shared'})
-- ARGV[1] holder value, ARGV[2] ttl ms, ARGV[3] public id, ARGV[4] ticket ms, ARGV[5] history
-- cap (for the entry of an attempt that never released, see below; an attempt that ends its run
-- here leaves the queue with its own entry), ARGV[6] tick ms (how long a tick lasts from when
-- the hosts fired: `--every`'s hold), ARGV[7] ms since this attempt's run began (its host fired),
-- ARGV[8] how many attempts stand by at a time (`--standbys`)
-- Returns {1, fence, server clock in µs, attempt} acquired (attempt 1 opened the tick) |
-- {0, pttl, holder, rank, tick ms left} standing by | {3, pttl, holder} held, and not this
-- attempt's to stand by for (the tick has its standbys, or a run of an earlier tick holds the
-- lock): its run ends skipped, recorded here | {2, 'done' | 'over'} the tick completed, or
-- ended, elsewhere | {-1, type} | {-2, helper key} as acquire.lua.
local refused, kind, counter, us, now = preflight('string')
if refused then return refused end
if held_shared(KEYS[7], now) then return {-1, 'shared'} end
local spoiled = get_or_wrongtype(KEYS[6])
if spoiled ~= false and not read_tick(KEYS[6]) then return {-2, KEYS[6]} end
prune_queue(KEYS[3], KEYS[4], now)
local current = false
if kind == 'string' then current = redis.call('GET', KEYS[1]) end
local tick = read_tick(KEYS[6])

local function take(attempt)
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  dequeue(KEYS[3], KEYS[4], ARGV[3])
  return {1, next_fence(KEYS[2], counter, us, KEYS[5]), us, attempt}
end

if current == ARGV[1] then
  -- Our own earlier attempt succeeded but its reply was lost: still ours.
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  dequeue(KEYS[3], KEYS[4], ARGV[3])
  return {1, next_fence(KEYS[2], counter, us, KEYS[5]), us, tick and tick.attempt or 1}
end

-- A waiter queued before this tick started (or with no tick under way) stood by for a tick that
-- has ended: the next one is not its own. Queue scores and tick starts are both the server's
-- clock in ms.
local queued = redis.call('ZSCORE', KEYS[3], ARGV[3])
if queued and (not tick or tonumber(queued) < tonumber(tick.start)) then return {2, 'over'} end

-- The tick completed, or ended, elsewhere: the run ends. An attempt that never stood by ends
-- with this one request, its skip recorded here; a standby leaves the queue with its own entry.
local function ended(word)
  if not queued then note_skipped(KEYS[5], 5) end
  return {2, word}
end
-- Held, and this attempt not needed: its run ends here, one request, as without --standby.
local function pass()
  note_skipped(KEYS[5], 5)
  return {3, redis.call('PTTL', KEYS[1]), current}
end

if not tick then
  if current then return pass() end
  -- The tick is the schedule's: it began when this run's host fired, and its record ends the
  -- tick's length after that, however late the attempt that opens it (a first attempt after
  -- --spread, or one that rebuilds a record the server lost mid-tick), so that it never
  -- outlasts the tick and makes the next one skip.
  local began = tonumber(ARGV[7]) or 0
  local left = tonumber(ARGV[6]) - began
  if left <= 0 then return ended('over') end
  redis.call('SET', KEYS[6], 'open ' .. string.format('%d', now - began) .. ' 1 ' .. ARGV[1], 'PX', left)
  return take(1)
end
if tick.state == 'done' then return ended('done') end
local ticket = tonumber(ARGV[4])
if not current then
  -- The tick is not done and nobody holds it: the attempt under way ended without completing
  -- it (its holder handed it on, or is gone and its lease expired). The first attempt of this
  -- tick to come takes it over: every standby is woken or looks by itself, so none waits behind
  -- one that died. An attempt that never released is recorded as lost: nothing else will write
  -- its history.
  if tick.holder ~= '' then
    local id, host, pid = string.match(tick.holder, '^(%S+) host=(%S*) pid=(%d+)')
    local cap = tonumber(ARGV[5])
    if id and cap and cap > 0 then
      append(KEYS[5], cap, {'outcome', 'lost', 'host', host, 'pid', pid, 'id', id,
        'duration_ms', string.format('%d', now - tonumber(tick.start)),
        'attempt', string.format('%d', tick.attempt)}, true)
    end
  end
  tick.attempt = tick.attempt + 1
  tick.holder = ARGV[1]
  write_tick(KEYS[6], tick)
  return take(tick.attempt)
end
-- A standby that died leaves the queue when its ticket ends (pruned above): a later attempt
-- then stands by in its place. Only this tick's standbys count: one of an earlier tick, dead
-- before its ticket ended, stands by for nothing.
local standbys = redis.call('ZCOUNT', KEYS[3], tick.start, '+inf')
if not queued and standbys >= tonumber(ARGV[8]) then return pass() end
enqueue(KEYS[3], KEYS[4], ARGV[3], now, ticket)
return {0, redis.call('PTTL', KEYS[1]), current, rank(KEYS[3], ARGV[3]), redis.call('PTTL', KEYS[6])}
