-- The rest of release.lua, after queue.lua: waiters are queued.
-- A queue spoiled by hand is left alone (its waiters are told so by their acquire).
if bad_queue(KEYS[2], KEYS[3]) then return 1 end
-- Wake the head of the queue only. A hint: it re-checks with acquire, so a lost message costs
-- latency (until its next ticket renewal), never safety.
prune_queue(KEYS[2], KEYS[3], now_ms())
wake_head(KEYS[2], ARGV[3], ARGV[4])
return 1
