-- Extend our lease; never re-create a key that is gone.
-- KEYS[1] lock key; ARGV[1] our holder value, ARGV[2] ttl in ms
-- Returns 1 renewed | 0 not ours (gone, another holder, or another type)
if redis.call('TYPE', KEYS[1]).ok ~= 'string' then return 0 end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
return redis.call('PEXPIRE', KEYS[1], ARGV[2])
