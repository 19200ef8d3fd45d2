-- Acquire an exclusive lock in one round trip: this file's fast path runs right after
-- prelude.lua, then queue.lua's functions are defined and acquire_queued.lua goes on. (A
-- script's `local function`s are created anew on every call, so the common case stops before
-- the queue's are created; what that saves the server is in docs/benchmarks.md.)
-- KEYS[1] lock, KEYS[2] fencing counter (never expires), KEYS[3] queue, KEYS[4] ticket expiries,
-- KEYS[5] history, KEYS[6] the shared holders (`--shared`, see shared_acquire.lua)
-- ARGV[1] holder value "<public id> host=... pid=... started=... program=...", ARGV[2] ttl ms,
-- ARGV[3] public id, ARGV[4] ticket ms (0: not waiting, do not queue), ARGV[5] history cap: an
-- attempt that is not waiting and finds the lock held ends its run, recorded as skipped (see
-- `note_skipped`)
-- Returns {1, fence, server clock in µs} acquired | {0, pttl, holder, rank} not now | {-1, type} key misused |
-- {-2, helper key} a helper key spoiled by hand (pttl -2: the lock is free but promised to the
-- head of the queue). Nothing is written before every check has passed.
-- The common case first, in as few commands as it can be done safely: nobody queued (neither
-- queue key exists), no shared holder (their set exists only while one's lease lasts), the
-- fencing counter sound, the key free. SET NX is the check and the write at once; nothing is
-- written before the counter has been read and checked.
if redis.call('EXISTS', KEYS[3], KEYS[4], KEYS[6]) == 0 then
  local counter = read_fence(KEYS[2])
  if counter and redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
    local us = now_us()
    return {1, next_fence(KEYS[2], counter, us, KEYS[5]), us}
  end
end
