-- Shared prelude of every script that writes a lock (acquire, release, semaphores, leave, force
-- release): the server clock, the fencing counter and the run history; only what the fast paths
-- of acquire.lua and release.lua need. queue.lua has the rest.
redis.replicate_commands()

-- The server clock in microseconds (exact in a Lua number until the year 2255).
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- GET of a key that may be of another type (spoiled by hand, or a semaphore): WRONGTYPE gives
-- nil, where redis.call would fail the script; any other error (an ACL without GET) is raised
-- as it came, so the refusal still names the command.
local function get_or_wrongtype(k)
  local v = redis.pcall('GET', k)
  if type(v) == 'table' and v.err then
    if string.find(v.err, 'WRONGTYPE', 1, true) then return nil end
    error(v)
  end
  return v
end

-- A holder value as lockrun writes it: `<hex id> host=<h> pid=<n> started=<utc> …`. What lockrun
-- did not write is not its to touch. Mirrors HolderValue::parse (src/lock/holder.rs), which reads
-- the value that HolderValue::format writes.
local function holder_shaped(v)
  return type(v) == 'string' and string.find(v, '^%x+ host=%S* pid=%d+ started=%S') ~= nil
end

-- Whether an existing sorted set is a lockrun semaphore: its members are holder values. Someone's
-- own sorted set of the same name (a leaderboard) must be refused, never pruned as if its
-- scores were expired leases. The first and the last member are looked at: two commands
-- whatever the set's size.
local function lockrun_zset(k)
  return holder_shaped(redis.call('ZRANGE', k, 0, 0)[1])
    and holder_shaped(redis.call('ZRANGE', k, -1, -1)[1])
end

-- The fencing counter's value (0 when absent), or nil when it is not a whole number we could
-- have written. One GET: a key of another type answers an error, which pcall turns into nil
-- instead of failing the script (nothing has been written at this point either way).
-- Validation comes before any write: Redis does not undo a script's earlier writes when a later
-- command fails, so a script that fails halfway would leave a lock nobody holds.
local function read_fence(f)
  local v = get_or_wrongtype(f)
  if v == false then return 0 end
  if type(v) ~= 'string' then return nil end
  local n = tonumber(v)
  if n and n >= 0 and n < 9007199254740992 and n == math.floor(n) then return n end
end

-- How long a key's history stream outlives its last refresh: 40 days, so a monthly job keeps
-- its history.
local HISTORY_MS = 3456000000
local DAY_US = 86400000000

-- The next fencing number: above every number this counter handed out, and at least the server
-- clock in microseconds. So when the counter vanishes (a restart without persistence, a failover
-- to a lagging replica, a restored snapshot) numbers resume above every one handed out before,
-- provided the server's clock has not gone back by more than the time since that number.
-- The counter itself expires 40 days after the key's last lock, with the key's history: a
-- per-pipeline name (`deploy-$BRANCH`) leaves nothing behind for good, and since every number is
-- floored by the server clock, the next lock after that still gets a larger one.
-- The first lock of a (UTC) day also moves the history stream's expiry (`h`, if it exists)
-- 40 days ahead: the releases that follow append to it without touching its expiry (see `note`),
-- so the stream is gone 39 to 40 days after the key's last run, for one command a day.
local function next_fence(f, counter, us, h)
  local n = math.max(counter + 1, us)
  redis.call('SET', f, string.format('%.0f', n), 'PX', HISTORY_MS)
  if math.floor(counter / DAY_US) ~= math.floor(n / DAY_US) then
    redis.pcall('PEXPIRE', h, HISTORY_MS)
  end
  return n
end

-- Appends one entry (field/value pairs) to a key's history stream `h`, trimmed to about `cap`
-- entries (approximate trimming drops whole stream nodes: cheap). Best effort by design: pcall,
-- so a server that refuses XADD (an ACL line without it, maxmemory) or a history key spoiled by hand
-- never changes a run's outcome; a key of another type makes XADD fail without writing, which is
-- the type check.
-- A stream is never left without an expiry: the entry goes in with NOMKSTREAM, and only when
-- that finds no stream (or the server predates NOMKSTREAM, Redis < 6.2) is the stream created
-- and given its 40 days. An append moves the expiry only with `refresh`: a release leaves that
-- to the day's first acquire (`next_fence`); the rarer entries (skipped, aborted, forced)
-- refresh it themselves, since no acquire of theirs did.
local function append(h, cap, fields, refresh)
  local id = redis.pcall('XADD', h, 'NOMKSTREAM', 'MAXLEN', '~', cap, '*', unpack(fields))
  if type(id) == 'string' then
    if refresh then redis.pcall('PEXPIRE', h, HISTORY_MS) end
    return
  end
  if type(id) == 'table' and id.err and string.find(id.err, 'WRONGTYPE', 1, true) then return end
  id = redis.pcall('XADD', h, 'MAXLEN', '~', cap, '*', unpack(fields))
  if type(id) == 'table' and id.err then return end
  redis.pcall('PEXPIRE', h, HISTORY_MS)
end

-- A run's entry in the key's history (`lockrun history`), from ARGV[first] on: the cap (0:
-- record nothing), then field/value pairs. `lost`: the run no longer held the key at its end,
-- whatever the caller thought; a run whose job ran ("ran", or "timeout": stopped at its time
-- limit) is then recorded as lost (its lock was deleted or expired under it; the same rule as
-- `Outcome::lost_if_key_gone`). `refresh`: see `append`.
local function note(h, first, lost, refresh)
  local cap = tonumber(ARGV[first])
  if not cap or cap <= 0 then return end
  local fields = {unpack(ARGV, first + 1)}
  if lost then
    for i = 1, #fields - 1, 2 do
      if fields[i] == 'outcome' and (fields[i + 1] == 'ran' or fields[i + 1] == 'timeout') then
        fields[i + 1] = 'lost'
      end
    end
  end
  append(h, cap, fields, refresh)
end
