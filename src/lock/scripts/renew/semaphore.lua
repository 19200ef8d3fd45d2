-- Extend our slot of a semaphore; never re-create one that expired or was removed.
-- KEYS[1] semaphore key; ARGV[1] our holder value, ARGV[2] ttl in ms
-- Returns the server clock in µs: renewed (see renew.lua) | 0 not ours
-- TIME before writes: needs effects replication on Redis < 5 (the default since 5).
redis.replicate_commands()
if redis.call('TYPE', KEYS[1]).ok ~= 'zset' then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- Ours first: a set without our slot is not touched (it may not even be lockrun's).
local mine = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not mine or tonumber(mine) <= now then return 0 end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[2]), ARGV[1])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIRE', KEYS[1], math.max(1, tonumber(last[2]) - now))
return tonumber(t[1]) * 1000000 + tonumber(t[2])
