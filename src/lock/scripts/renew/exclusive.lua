-- Extend our lease; never re-create a key that is gone.
-- KEYS[1] lock key; ARGV[1] our holder value, ARGV[2] ttl in ms
-- Returns the server clock in µs: renewed (lockrun compares the rate of its own clock with
-- it) | 0 not ours (gone, another holder, or another type)
if redis.call('TYPE', KEYS[1]).ok ~= 'string' then return 0 end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
-- TIME after the write: allowed without effects replication too (Redis < 5).
local t = redis.call('TIME')
return tonumber(t[1]) * 1000000 + tonumber(t[2])
