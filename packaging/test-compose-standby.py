#!/usr/bin/env python3
"""The compose scenario's three replicas with --standby, one fault on the replica that took each
tick (run by packaging/test.sh, which brings the replicas up with LOCKRUN_STANDBY=1 and a short
LOCKRUN_TTL; root, DOCKER_HOST set).

One tick of each, about a second into the job, to the replica whose lockrun holds the key:

  healthy         nothing
  job-killed      SIGKILL to the job's process group
  stopped         `docker stop` (SIGTERM to tick.sh, passed to lockrun, forwarded to the job)
  lockrun-killed  SIGKILL to lockrun alone (the job gets SIGTERM, the parent-death signal)
  cut-off         `docker network disconnect` from Redis's network, connected again 6 s in
  frozen          `docker pause` (the whole container frozen), `docker unpause` 6 s in
  host-died       `docker kill` (every process of the container, at once)

A stopped or killed container is started again before the next tick. Each tick must complete
exactly once (one `job: done`), on another replica with a higher fence after a fault, after the
takeover's WARN line; fences only increase from tick to tick. No two replicas' jobs may be live
at once: the test looks every 10 ms at the winner's job (its process group, from the host) and a
job is live until the last look that found it, so an overlap found is certain; a frozen job is
not live while frozen. Thawed, the frozen job must be stopped by its own lockrun before its end:
the one overlap allowed, under a second and reported, is that thawed job's last moments (the one
docs/safety.md says fences are for). The time from the fault to the takeover's start is printed
against the TTL.

Usage: test-compose-standby.py FIRST_TICK TICK_SECONDS TTL_SECONDS NETWORK REDIS_ID REPLICA_ID...
"""
import json
import os
import re
import signal
import subprocess
import sys
import time
from datetime import datetime

FAULTS = ["healthy", "job-killed", "stopped", "lockrun-killed", "cut-off", "frozen", "host-died"]
# The run hands the tick on itself, at once; for the others only its lease's end does.
AT_ONCE = {"job-killed", "stopped"}
FAULT_AT = 1.0          # seconds into the tick
RESTORE_AT = 6.0        # a cut or a freeze lifted, seconds into the tick: after the takeover
LABELS = {
    "healthy": "none (a healthy tick)",
    "job-killed": "job killed (SIGKILL to its process group)",
    "stopped": "`docker stop` (SIGTERM to tick.sh, lockrun, the job)",
    "lockrun-killed": "lockrun killed (SIGKILL; the job gets SIGTERM)",
    "cut-off": f"`docker network disconnect`, for {RESTORE_AT - FAULT_AT:g} s",
    "frozen": f"`docker pause`, for {RESTORE_AT - FAULT_AT:g} s",
    "host-died": "`docker kill`",
}
TAKEOVER = "the host that took this tick did not complete it; running it here"

first, tick, ttl = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
network, redis_id, replicas = sys.argv[4], sys.argv[5], sys.argv[6:]
assert len(replicas) == 3, replicas


def docker(*args):
    r = subprocess.run(["docker", *args], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"FAIL: docker {' '.join(args)}: {r.stderr.strip()}")
    return r.stdout


def sleep_until(t):
    d = t - time.time()
    if d > 0:
        time.sleep(d)


def holder():
    """The replica whose lockrun holds the key (its hostname is the container's short id)."""
    deadline = time.time() + 2
    while time.time() < deadline:
        value = docker("exec", redis_id, "redis-cli", "GET", "report")
        m = re.search(r"host=(\w+)", value)
        if m:
            found = [c for c in replicas if c.startswith(m.group(1))]
            if len(found) == 1:
                return found[0]
        time.sleep(0.05)
    sys.exit("FAIL: no replica holds the key a second into the tick")


def procs(container):
    """The container's processes, by their PIDs on this host."""
    return [int(line) for line in docker("top", container, "-eo", "pid").split()[1:]]


def stat(pid):
    """(process group, state) of a process, or None once it is gone."""
    try:
        s = open(f"/proc/{pid}/stat").read()
    except OSError:
        return None
    f = s[s.rfind(")") + 2:].split()
    return int(f[2]), f[0]


def comm(pid):
    try:
        return open(f"/proc/{pid}/comm").read().strip()
    except OSError:
        return ""


def group_alive(pids, pgid):
    """Whether a process of the group is alive (a zombie only waits to be reaped)."""
    return any((s := stat(p)) and s[0] == pgid and s[1] != "Z" for p in pids)


# ------------------------------------------------------------------------------ the faults
injected = {}   # tick -> what was done and seen
for i, kind in enumerate(FAULTS):
    t = first + i * tick
    sleep_until(t + FAULT_AT)
    winner = holder()
    pids = procs(winner)
    lockrun = [p for p in pids if comm(p) == "lockrun"]
    job = [p for p in pids if comm(p) == "job.sh"]
    if len(lockrun) != 1 or len(job) != 1:
        sys.exit(f"FAIL: tick {t}: the winner {winner[:12]} runs {len(lockrun)} lockrun, {len(job)} job.sh")
    pgid = stat(job[0])[0]
    at = time.time()
    cmd = None
    if kind == "job-killed":
        os.killpg(pgid, signal.SIGKILL)
    elif kind == "stopped":
        cmd = ["stop", "-t", "20", winner]
    elif kind == "lockrun-killed":
        os.kill(lockrun[0], signal.SIGKILL)
    elif kind == "cut-off":
        cmd = ["network", "disconnect", network, winner]
    elif kind == "frozen":
        cmd = ["pause", winner]
    elif kind == "host-died":
        cmd = ["kill", winner]
    if cmd:
        # In the background: the job is watched meanwhile.
        pending = subprocess.Popen(["docker", *cmd], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    f = {"kind": kind, "winner": winner, "at": at, "restored": None,
         "died": at if kind in ("job-killed", "host-died") else None, "alive": at, "gone": None}
    restore = t + RESTORE_AT if kind in ("cut-off", "frozen") else None
    while time.time() < t + tick - 3:
        if restore and f["restored"] is None and time.time() >= restore:
            pending.wait()
            if kind == "frozen":
                docker("unpause", winner)
            else:
                docker("network", "connect", network, winner)
            f["restored"] = time.time()
        if f["gone"] is None:
            looked = time.time()
            if group_alive(pids, pgid):
                f["alive"] = looked
            else:
                f["gone"] = looked
        if f["gone"] is not None and (restore is None or f["restored"] is not None):
            break
        time.sleep(0.01)
    if cmd:
        if pending.wait() != 0:
            sys.exit(f"FAIL: docker {' '.join(cmd)}: {pending.stderr.read().strip()}")
    if kind == "healthy":
        f["alive"] = f["gone"] = None
    elif f["gone"] is None:
        sys.exit(f"FAIL: tick {t} ({kind}): the winner's job was still alive {tick - 3} s into the tick")
    injected[t] = f
    if kind in ("stopped", "host-died"):
        # Back before the next tick, as a restarted host would be.
        sleep_until(t + tick - 2.5)
        docker("start", winner)

sleep_until(first + len(FAULTS) * tick + 0.5)

# ------------------------------------------------------------------------------- the logs
def stamp(text):
    """lockrun's own timestamp at the start of a log line (the real clock; the host's)."""
    m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?Z", text)
    if not m:
        return None
    base = datetime.strptime(m.group(1) + "+0000", "%Y-%m-%dT%H:%M:%S%z").timestamp()
    return base + float(m.group(2) or 0)


lines = {}   # (tick, replica) -> [text]
for c in replicas:
    slot = None
    for line in docker("logs", c).splitlines():
        m = re.match(r"tick: slot=(\d+)", line)
        if m:
            slot = int(m.group(1))
        elif slot is not None:
            lines.setdefault((slot, c), []).append(line)

names = {c: f"replica {n + 1}" for n, c in enumerate(replicas)}
errors = []


def check(cond, msg):
    if not cond:
        errors.append(msg)


def acquired(ls):
    """(time, fence) of lockrun's `redis lock acquired, starting job` line."""
    for l in ls:
        if "redis lock acquired, starting job" in l:
            return stamp(l), int(re.search(r"fence=(\d+)", l).group(1))
    return None


rows = []
last_fence = 0
for t, f in sorted(injected.items()):
    kind, winner = f["kind"], f["winner"]
    done = [c for c in replicas if any(l.startswith("job: done") for l in lines.get((t, c), []))]
    check(len(done) == 1, f"tick {t} ({kind}): completed by {len(done)} replicas, expected exactly 1")
    if len(done) != 1:
        continue
    runner = done[0]
    ls, wl = lines[(t, runner)], lines.get((t, winner), [])
    won = acquired(wl)
    ran = acquired(ls)
    check(won is not None, f"tick {t} ({kind}): no 'redis lock acquired' from the winner {names[winner]}")
    if kind == "healthy":
        check(runner == winner, f"tick {t}: completed by {names[runner]}, not by the winner")
        for c in replicas:
            if c != runner:
                o = lines.get((t, c), [])
                check(any("standing by for the rest of this tick" in l for l in o), f"tick {t}: {names[c]} did not stand by")
                check(any("this tick completed on another host; skipping" in l for l in o), f"tick {t}: {names[c]} did not skip after the run")
                check("tick: lockrun exit=0" in o, f"tick {t}: {names[c]} did not exit 0 (-E 0)")
        fence = won[1] if won else 0
        rows.append((LABELS[kind], names[winner], "the same", "—", "—"))
    else:
        check(runner != winner, f"tick {t} ({kind}): the faulted winner completed it")
        check(any(TAKEOVER in l for l in ls), f"tick {t} ({kind}): no takeover WARN from {names[runner]}")
        check(ran is not None and won is not None and ran[1] > won[1],
              f"tick {t} ({kind}): the takeover's fence {ran and ran[1]} is not above the winner's {won and won[1]}")
        start = ran[0] if ran else 0
        # The winner's job: live until the last look that found it, but not while frozen.
        end = f["died"] if f["died"] is not None else f["alive"]
        overlap = 0.0
        if kind == "frozen":
            # Live before the freeze, and again from the thaw until its lockrun stopped it.
            check(start > f["at"], f"tick {t} (frozen): the takeover started before the freeze")
            overlap = max(0.0, end - max(start, f["restored"]))
            check(overlap < 1.0, f"tick {t} (frozen): the thawed job lived {overlap:.3f} s beside the takeover's")
            check(any("redis lock lost" in l for l in wl), f"tick {t} (frozen): the thawed lockrun did not find its lock lost")
        else:
            overlap = max(0.0, end - start)
            check(end < start, f"tick {t} ({kind}): the winner's job was alive {end - start:.3f} s after the takeover's job started")
        # What the winner's tick.sh and job say of it (nothing, for a killed container).
        said = {"job-killed": ["tick: lockrun exit=137"],
                "stopped": ["job: got SIGTERM", "redis lock released", "tick: lockrun exit=143"],
                "lockrun-killed": ["job: got SIGTERM", "tick: lockrun exit=137"],
                "cut-off": ["job: got SIGTERM", "tick: lockrun exit=76"],
                "frozen": ["tick: lockrun exit=76"],
                "host-died": []}[kind]
        for s in said:
            check(any(s in l for l in wl), f"tick {t} ({kind}): the winner {names[winner]} did not say '{s}'")
        check(not any(l.startswith("job: done") for l in wl), f"tick {t} ({kind}): the winner's job reached its end")
        delay = start - f["at"]
        bound = 1.5 if kind in AT_ONCE else ttl + 1.0
        check(0 < delay <= bound, f"tick {t} ({kind}): fault to takeover {delay:.2f} s, expected within {bound} s")
        fence = ran[1] if ran else 0
        rows.append((LABELS[kind], names[winner], names[runner], f"{delay:.3f} s",
                     f"{overlap * 1000:.1f} ms after the thaw" if kind == "frozen"
                     else f"{overlap * 1000:.1f} ms" if overlap else "none"))
    check(fence > last_fence, f"tick {t} ({kind}): fence {fence} not above the previous tick's {last_fence}")
    last_fence = fence

print(f"| fault, {FAULT_AT:g} s into the tick, to the replica that took it | took the tick | ran it | fault → takeover's start (TTL {ttl:g} s) | overlap |")
print("|---|---|---|---|---|")
for r in rows:
    print("| " + " | ".join(map(str, r)) + " |")

history = json.loads(docker("exec", replicas[0], "lockrun", "history", "--json", "-n", "50", "report"))
takeovers = [h for h in history
             if h["time_ms"] >= first * 1000 and h["outcome"] == "ran" and (h.get("attempt") or 1) >= 2]
check(len(takeovers) == len(FAULTS) - 1, f"history: {len(takeovers)} takeovers (ran, attempt 2), expected {len(FAULTS) - 1}")
if errors:
    for c in replicas:
        print(f"--- {names[c]}", file=sys.stderr)
        for (t, r), ls in sorted(lines.items()):
            if r == c:
                print("\n".join(f"  [{t}] {l}" for l in ls), file=sys.stderr)
    print("\n".join("FAIL: " + e for e in errors), file=sys.stderr)
    sys.exit(1)
print(f"ok: {len(FAULTS)} ticks with standbys, each completed exactly once; {len(FAULTS) - 1} faults taken over with a higher fence, no overlap of live jobs")
