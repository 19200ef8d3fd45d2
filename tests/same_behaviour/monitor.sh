#!/usr/bin/env bash
# Whether two lockrun builds ask Redis the same: runs fixed scenarios (each kind of lock, a
# conflict, a wait, a takeover, the operators' commands) with the lockrun binary $1 against a
# fresh redis-server on port $2 under MONITOR, and prints the set of command shapes it saw
# (monitor_mask.py). Run it for both builds and diff the outputs: a refactor's must be empty.
#   bash tests/same_behaviour/monitor.sh OLD/lockrun 27101 > old.txt
#   bash tests/same_behaviour/monitor.sh NEW/lockrun 27102 > new.txt; diff old.txt new.txt
set -u
L=$1; P=$2; d=$(mktemp -d)
redis-server --port $P --save '' --appendonly no --dir $d --daemonize yes --logfile $d/r.log >/dev/null
until redis-cli -p $P ping >/dev/null 2>&1; do sleep 0.02; done
redis-cli -p $P monitor > $d/mon.txt & M=$!
sleep 0.2
U=redis://127.0.0.1:$P
r() { "$L" -q -r $U "$@" >/dev/null 2>&1; }
r plain -- true
r plain -- sh -c 'exit 3'
r -t 1s held -- sleep 1.2 & a=$!
sleep 0.2; r -E 0 held -- true; r --wait 3s held -- true; wait $a
p=; for i in 1 2 3; do r --limit 2 sem -- sleep 0.3 & p="$p $!"; done; wait $p
r --shared sh -- sleep 0.5 & a=$!; r --shared sh -- sleep 0.5 & b=$!; sleep 0.1; r -E 0 sh -- true; wait $a $b
r --every 1m ev -- true; r -E 0 --every 1m ev -- true
r --every 1m --standby --ttl 1s tk -- sh -c 'sleep 0.3; kill -9 $$' & a=$!
sleep 0.1; r -E 0 --every 1m --standby --ttl 1s tk -- sleep 0.2 & b=$!; wait $a $b
r -t 10s stuck -- sleep 0.5 & a=$!; sleep 0.2; "$L" -q -r $U release --force stuck >/dev/null 2>&1; wait $a
"$L" -r $U status plain >/dev/null 2>&1; "$L" -r $U list >/dev/null 2>&1; "$L" -r $U history ev >/dev/null 2>&1
sleep 0.3; kill $M; redis-cli -p $P shutdown nosave >/dev/null 2>&1
# Mask: timestamps, values that differ per run (tokens, ids, hosts, pids, numbers).
python3 "$(dirname "$0")/monitor_mask.py" < $d/mon.txt
rm -rf $d
