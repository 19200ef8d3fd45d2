-- Shared prelude of the acquire, release and leave scripts: the waiter queue.
--
-- Waiters (lockruns with --wait) queue in arrival order in a sorted set Q (score = arrival time,
-- member = the waiter's public id, never its secret token: any client can read the queue). Each
-- entry is a ticket that expires (sorted set E, score = expiry) unless its waiter renews it, so
-- a waiter that dies leaves the queue by itself within one ticket TTL: no queue can deadlock
-- behind a dead waiter. A release wakes only the head of the queue (pub/sub, payload = its id),
-- so a release costs one attempt, not one per waiter. All times come from the server's clock
-- (TIME); clients' clocks are never compared.
redis.replicate_commands()

-- The server clock in microseconds (exact in a Lua number until the year 2255).
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local function now_ms()
  return math.floor(now_us() / 1000)
end

-- Validation comes before any write: Redis does not undo a script's earlier writes when a later
-- command fails, so a script that fails halfway would leave a lock nobody holds. These keys are
-- lockrun's own (no lock name can reach them); only a hand edit can spoil them.
-- Returns the first of the queue keys that is not a sorted set (or absent), else nil.
local function bad_queue(q, e)
  for _, k in ipairs({q, e}) do
    local t = redis.call('TYPE', k).ok
    if t ~= 'none' and t ~= 'zset' then return k end
  end
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

-- The fencing counter's value (0 when absent), or nil when it is not a whole number we could
-- have written. One GET: a key of another type answers an error, which pcall turns into nil
-- instead of failing the script (nothing has been written at this point either way).
local function read_fence(f)
  local v = get_or_wrongtype(f)
  if v == false then return 0 end
  if type(v) ~= 'string' then return nil end
  local n = tonumber(v)
  if n and n >= 0 and n < 9007199254740992 and n == math.floor(n) then return n end
end

-- Checks every helper key before a script's first write (Redis never rolls a script back):
-- returns the fencing counter, or nil and the first spoiled key.
local function check_helpers(f, q, e)
  local counter = read_fence(f)
  if not counter then return nil, f end
  local bad = bad_queue(q, e)
  if bad then return nil, bad end
  return counter
end

-- The next fencing number: above every number this counter handed out, and at least the server
-- clock in microseconds. So when the counter vanishes (a restart without persistence, a failover
-- to a lagging replica, a restored snapshot) numbers resume above every one handed out before,
-- provided the server's clock has not gone back by more than the time since that number.
local function next_fence(f, counter, us)
  local n = math.max(counter + 1, us)
  redis.call('SET', f, string.format('%.0f', n))
  return n
end

local function prune_queue(q, e, now)
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', e, '-inf', now)) do
    redis.call('ZREM', q, id)
    redis.call('ZREM', e, id)
  end
end

-- Position in the queue; an id not queued stands behind everyone.
local function rank(q, id)
  local r = redis.call('ZRANK', q, id)
  if r then return r end
  return redis.call('ZCARD', q)
end

local function enqueue(q, e, id, now, ticket)
  redis.call('ZADD', q, 'NX', now, id)
  redis.call('ZADD', e, now + ticket, id)
  -- Every ticket ends within `ticket` ms from now, so the queue keys never outlive them.
  redis.call('PEXPIRE', q, ticket)
  redis.call('PEXPIRE', e, ticket)
end

local function dequeue(q, e, id)
  redis.call('ZREM', q, id)
  redis.call('ZREM', e, id)
end

local function wake_head(q, channel)
  local head = redis.call('ZRANGE', q, 0, 0)
  if head[1] then redis.call('PUBLISH', channel, head[1]) end
end

-- A run's entry in the key's history stream (`lockrun history`), from ARGV[first] on: the
-- entry's cap, then field/value pairs. At most about `cap` entries (approximate trimming drops
-- whole stream nodes: cheap), and the stream is gone 40 days after the key's last run (a
-- monthly job keeps its history). Best effort by design: pcall, so a server that refuses XADD
-- (an older ACL line, maxmemory) or a history key spoiled by hand never changes a run's outcome.
-- `lost`: the run no longer held the key at its end, whatever the caller thought; a run that
-- "ran" is then recorded as lost (its lock was deleted or expired under it).
local function note(h, first, lost)
  local cap = tonumber(ARGV[first])
  if not cap or cap <= 0 then return end
  local fields = {unpack(ARGV, first + 1)}
  if lost then
    for i = 1, #fields - 1, 2 do
      if fields[i] == 'outcome' and fields[i + 1] == 'ran' then fields[i + 1] = 'lost' end
    end
  end
  -- A key of another type makes XADD fail without writing (pcall): that is the type check.
  local ok = redis.pcall('XADD', h, 'MAXLEN', '~', cap, '*', unpack(fields))
  if type(ok) == 'table' and ok.err then return end
  redis.pcall('PEXPIRE', h, 3456000000)
end
