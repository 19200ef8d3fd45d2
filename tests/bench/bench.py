"""lockrun's benchmarks. Run through tests/bench/run.sh (which installs the peers).

Prints Markdown: with no argument the whole of docs/benchmarks.md (run.sh writes it there), with
part names only those parts' tables. Every figure is measured in this run, on this machine,
against a local throwaway redis-server. Nothing here asserts timings: it reports them.
"""
import contextlib
import datetime as dt
import io
import json
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# The lockrun that ships (static glibc, packaging/build-static.sh; run.sh passes its path), and the
# plain `cargo build --release` one (dynamically linked) for comparison.
BIN_DYNAMIC = os.path.join(ROOT, "target", "release", "lockrun")
BIN = os.environ.get("BENCH_LOCKRUN") or BIN_DYNAMIC
# The same static build at a fixed address (-C relocation-model=static), for the cost of
# shipping a static-pie (run.sh builds it; the row is left out without it).
BIN_FIXED = os.environ.get("BENCH_LOCKRUN_FIXED")
# Any other lockrun to put side by side with the shipped one (a build of an older commit):
# BENCH_BASELINE=/path/to/lockrun [BENCH_BASELINE_LABEL=...] bash tests/bench/run.sh overhead (or memory, or fleet)
BASELINE = os.environ.get("BENCH_BASELINE")
BASELINE_LABEL = os.environ.get("BENCH_BASELINE_LABEL", "baseline")
WRAPPER = os.path.join(ROOT, "tests", "bench", "peers", "wrapper.py")
# The floor program (tests/bench/floor.c), built by run.sh: dynamic and static.
FLOOR = os.path.join(ROOT, "target", "bench-floor")
FLOOR_STATIC = os.path.join(ROOT, "target", "bench-floor-static")
PY = sys.executable
ENV = {k: v for k, v in os.environ.items() if not k.startswith("LOCKRUN_")}


def free_port():
    """A free loopback port: from the kernel, or from BENCH_PORTS=LOW-HIGH (for a machine where
    several people run servers at once, each in a range of their own; never the same one twice)."""
    low, _, high = os.environ.get("BENCH_PORTS", "").partition("-")
    for port in range(int(low), int(high) + 1) if high else [0]:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            got = s.getsockname()[1]
        if not high or got not in free_port.given:
            free_port.given.add(got)
            return got
    raise RuntimeError(f"no free port left in BENCH_PORTS={low}-{high}")


free_port.given = set()


class Redis:
    def __init__(self, tmp):
        self.port = free_port()
        self.sock = os.path.join(tmp, "redis.sock")
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--unixsocket", self.sock,
             "--save", "", "--appendonly", "no", "--maxclients", "16000", "--dir", tmp, "--logfile", "redis.log"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(500):
            if os.path.exists(self.sock):
                break
            time.sleep(0.01)
        self.tcp = f"redis://127.0.0.1:{self.port}"
        self.unix = f"unix://{self.sock}"

    def cmd(self, *args):
        return subprocess.run(["redis-cli", "-s", self.sock, *map(str, args)], capture_output=True,
                              text=True, check=True).stdout

    def info(self, section):
        out = {}
        for line in self.cmd("INFO", section).splitlines():
            if ":" in line and not line.startswith("#"):
                k, v = line.split(":", 1)
                out[k] = v
        return out

    def commandstats(self):
        stats = {}
        for k, v in self.info("commandstats").items():
            calls = int(v.split("calls=")[1].split(",")[0])
            stats[k.replace("cmdstat_", "")] = calls
        return stats

    def stop(self):
        self.proc.kill()
        self.proc.wait()


# Commands a client sends itself; everything else in commandstats was run by our Lua scripts.
TOP_LEVEL = {"eval", "evalsha", "script|load", "subscribe", "unsubscribe", "ping", "client|setinfo",
             "hello", "select", "auth", "info"}


def delta(before, after, names=None):
    keys = set(after) | set(before)
    d = {k: after.get(k, 0) - before.get(k, 0) for k in keys}
    return {k: v for k, v in d.items() if v and (names is None or k in names)}


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def hyperfine(commands, runs, rounds=10):
    """name -> argv; returns name -> list of seconds. Interleaved: `rounds` hyperfine runs of
    runs/rounds each, every command in each, so a machine that slows down or speeds up during
    the benchmark (a shared VM) weighs on every command alike rather than on whichever ran then."""
    times = {n: [] for n in commands}
    for _ in range(rounds):
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            args = ["hyperfine", "-N", "-i", "--style", "none", "-w", "3", "-r", str(max(2, runs // rounds)),
                    "--export-json", out.name]
            for n in commands:
                args += ["-n", n, " ".join(commands[n])]
            subprocess.run(args, check=True, stdout=subprocess.DEVNULL, env=ENV)
            data = json.load(open(out.name))
        for r in data["results"]:
            times[r["command"]] += r["times"]
    return times


def run_threads(target, n, args=lambda i: ()):
    """Runs `target` on n threads at once; returns the wall time until all are done."""
    threads = [threading.Thread(target=target, args=args(i)) for i in range(n)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - t0


def ms(x):
    return f"{x * 1000:.2f}"


def start_etcd(tmp):
    if not shutil.which("etcd") or not shutil.which("etcdctl"):
        return None, None
    client, peer = free_port(), free_port()
    proc = subprocess.Popen(
        ["etcd", "--data-dir", os.path.join(tmp, "etcd"), "--listen-client-urls", f"http://127.0.0.1:{client}",
         "--advertise-client-urls", f"http://127.0.0.1:{client}", "--listen-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-cluster", f"default=http://127.0.0.1:{peer}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"127.0.0.1:{client}"
    for _ in range(100):
        if subprocess.run(["etcdctl", "--endpoints", endpoint, "endpoint", "health"],
                          capture_output=True, env=dict(ENV, ETCDCTL_API="3")).returncode == 0:
            return proc, endpoint
        time.sleep(0.1)
    proc.kill()
    return None, None


def fresh_copy(path, tmp, name):
    """A copy of the binary at `path`, written now. How a file's pages came into the page cache
    moves its start-up by more than the builds compared here differ (see decisions.md, "Comparing
    two builds"); fresh copies put every binary in the same state."""
    if not path:
        return path
    copy = os.path.join(tmp, name)
    shutil.copyfile(path, copy)
    os.chmod(copy, 0o755)
    return copy


def overhead(redis, tmp):
    flockfile = os.path.join(tmp, "flock")
    open(flockfile, "w").close()
    BIN, BIN_DYNAMIC, BIN_FIXED, BASELINE = (
        fresh_copy(globals()[name], tmp, "bin-" + name) for name in ("BIN", "BIN_DYNAMIC", "BIN_FIXED", "BASELINE"))
    fast = {
        "true": ["true"],
        "flock -n FILE true": ["flock", "-n", flockfile, "true"],
        "lockrun (TCP)": [BIN, "-q", "-r", redis.tcp, "bench-tcp", "--", "true"],
        "lockrun (unix socket)": [BIN, "-q", "-r", redis.unix, "bench-unix", "--", "true"],
        "lockrun dynamically linked (TCP)": [BIN_DYNAMIC, "-q", "-r", redis.tcp, "bench-dyn", "--", "true"],
        **({"lockrun static, fixed address (TCP)": [BIN_FIXED, "-q", "-r", redis.tcp, "bench-fixed", "--", "true"]}
           if BIN_FIXED else {}),
        **({f"lockrun {BASELINE_LABEL} (TCP)": [BASELINE, "-q", "-r", redis.tcp, "bench-base", "--", "true"]}
           if BASELINE else {}),
        "floor program (C, dynamic)": [FLOOR, "127.0.0.1", str(redis.port), "bench-floor", "true"],
        "floor program (C, static)": [FLOOR_STATIC, "127.0.0.1", str(redis.port), "bench-floor-s", "true"],
        "redis-cli SET NX PX + DEL (sh)": ["sh", "-c",
            f"'redis-cli -p {redis.port} SET bench-cli 1 NX PX 30000 >/dev/null && true; redis-cli -p {redis.port} DEL bench-cli >/dev/null'"],
    }
    etcd, endpoint = start_etcd(tmp)
    if etcd:
        fast["etcdctl lock KEY true"] = ["env", "ETCDCTL_API=3", "etcdctl", "--endpoints", endpoint, "lock", "bench-etcd", "true"]
    slow = {
        "redis-py Lock": [PY, WRAPPER, "redis-py", redis.tcp, "bench-py", "true"],
        "python-redis-lock": [PY, WRAPPER, "python-redis-lock", redis.tcp, "bench-prl", "true"],
        "pottery Redlock": [PY, WRAPPER, "pottery", redis.tcp, "bench-pot", "true"],
    }
    # 1,000 runs of each in 50 rounds: the ratios to flock were seen to move by a few hundredths
    # between back-to-back runs of 300.
    times = hyperfine(fast, 1000, rounds=50)
    times.update(hyperfine(slow, 200))
    if etcd:
        etcd.kill()
    floor = statistics.median(times["flock -n FILE true"])
    print("\n### Wrapper overhead: `<wrapper> KEY -- true`\n")
    print("| command | runs | median ms | p95 ms | median / flock |")
    print("|---|---|---|---|---|")
    for name, ts in times.items():
        print(f"| {name} | {len(ts)} | {ms(statistics.median(ts))} | {ms(pct(ts, 95))} | {statistics.median(ts) / floor:.2f}x |")
    if not etcd:
        print("\n(etcd not available here: etcdctl row omitted)")
    print(OVERHEAD_NOTES)


def roundtrips(redis):
    print("\n### Redis requests per run (INFO commandstats delta / runs)\n")
    print("| path | requests per run | connections per run |")
    print("|---|---|---|")
    # Commands that our scripts also run (SET, GET, DEL, ...) would blur the count: the peers'
    # requests are not counted here, only lockrun's, whose every request is listed above.
    redis.cmd("SET", "rt-held", "someone", "PX", "600000")
    for label, argv in [
        ("uncontended `lockrun KEY -- true`", [BIN, "-q", "-r", redis.unix, "rt-free", "--", "true"]),
        ("conflict (`-E 0`, key held)", [BIN, "-q", "-E", "0", "-r", redis.unix, "rt-held", "--", "true"]),
        ("`--wait 1s`, uncontended", [BIN, "-q", "-w", "1s", "-r", redis.unix, "rt-wait", "--", "true"]),
    ]:
        n = 100
        before, conns = redis.commandstats(), int(redis.info("stats")["total_connections_received"])
        for _ in range(n):
            subprocess.run(argv, env=ENV, check=False)
        d = delta(before, redis.commandstats(), TOP_LEVEL - {"info"})
        conns = (int(redis.info("stats")["total_connections_received"]) - conns) / n
        parts = ", ".join(f"{v / n:g} {k.upper()}" for k, v in sorted(d.items()))
        print(f"| {label} | {sum(d.values()) / n:g} ({parts}) | {conns:g} |")
    # Renewals: one EVAL per TTL/3.
    before = redis.commandstats()
    subprocess.run([BIN, "-q", "-t", "300ms", "-r", redis.unix, "rt-renew", "--", "sleep", "1"], env=ENV)
    d = delta(before, redis.commandstats(), {"eval", "evalsha"})
    print(f"| `-t 300ms -- sleep 1` (renewals every 100 ms) | {d.get('eval', 0) + d.get('evalsha', 0)} scripts in total | 1 |")


def vm_hwm_kib(pid):
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        return None


def memory(redis, tmp):
    flockfile = os.path.join(tmp, "flock")
    # Fresh copies, as for the overhead table: how a file's pages came into the page cache moves
    # how many of them a run maps (decisions.md, "Comparing two builds").
    binary, baseline = (fresh_copy(path, tmp, "mem-" + name) for name, path in (("bin", BIN), ("base", BASELINE)))
    rows = {
        "lockrun": [binary, "-q", "-r", redis.unix, "mem", "--", "sleep", "1"],
        **({f"lockrun {BASELINE_LABEL}": [baseline, "-q", "-r", redis.unix, "mem-base", "--", "sleep", "1"]}
           if BASELINE else {}),
        "flock": ["flock", "-n", flockfile, "sleep", "1"],
        "redis-py Lock": [PY, WRAPPER, "redis-py", redis.tcp, "mem-py", "sleep", "1"],
        "python-redis-lock": [PY, WRAPPER, "python-redis-lock", redis.tcp, "mem-prl", "sleep", "1"],
        "pottery Redlock": [PY, WRAPPER, "pottery", redis.tcp, "mem-pot", "sleep", "1"],
    }
    etcd, endpoint = start_etcd(tmp)
    if etcd:
        rows["etcdctl lock"] = ["env", "ETCDCTL_API=3", "etcdctl", "--endpoints", endpoint, "lock", "mem-etcd", "sleep", "1"]
    print("\n### Peak RSS of the wrapper while the command runs (VmHWM, max of 5 runs)\n")
    print("| wrapper | peak RSS |")
    print("|---|---|")
    for name, argv in rows.items():
        peaks = []
        for _ in range(5):
            p = subprocess.Popen(argv, env=ENV)
            time.sleep(0.6)
            peaks.append(vm_hwm_kib(p.pid) or 0)
            p.wait()
        print(f"| {name} | {max(peaks) / 1024:.1f} MiB |")
    if etcd:
        etcd.kill()
    size = os.path.getsize(BIN)
    print(f"\nRelease binary (stripped, LTO): {size / 1024 / 1024:.2f} MiB ({size} bytes).")
    cold = []
    for _ in range(5):
        try:
            subprocess.run(["sync"])
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("3\n")
        except OSError:
            cold = None
            break
        t = time.perf_counter()
        subprocess.run([BIN, "--version"], stdout=subprocess.DEVNULL)
        cold.append(time.perf_counter() - t)
    warm = hyperfine({"v": [BIN, "--version"]}, 200)["v"]
    cold_s = f"{ms(statistics.median(cold))} ms (page cache dropped, median of 5)" if cold else "n/a (cannot drop the page cache here)"
    print(f"Start-up, `lockrun --version`: cold {cold_s}; warm {ms(statistics.median(warm))} ms (median of 200).")


def scale(redis):
    n, hold, ttl = 1000, 10, "3s"
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    cpu0 = redis.info("cpu")
    cmds0 = int(redis.info("stats")["total_commands_processed"])
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    procs = [subprocess.Popen([BIN, "-q", "-t", ttl, "-r", redis.unix, f"scale-{i}", "--", "sleep", str(hold)],
                              env=ENV, stdin=subprocess.DEVNULL) for i in range(n)]
    spawned = time.perf_counter() - t0
    time.sleep(1)
    held = int(redis.cmd("DBSIZE").strip())
    codes = [p.wait() for p in procs]
    wall = time.perf_counter() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu1 = redis.info("cpu")
    cmds = int(redis.info("stats")["total_commands_processed"]) - cmds0
    lock_cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    redis_cpu = sum(float(cpu1[k]) - float(cpu0[k]) for k in ("used_cpu_sys", "used_cpu_user"))
    print(f"\n### Scale: {n} lockruns, each holding its own key for {hold} s with TTL {ttl}\n")
    print("| figure | value |")
    print("|---|---|")
    print(f"| all {n} started in | {spawned:.2f} s |")
    print(f"| keys held 1 s in (locks + fence counters) | {held} |")
    print(f"| exit codes | {sorted(set(codes))} |")
    print(f"| wall time | {wall:.1f} s |")
    print(f"| CPU of all lockruns (+ their `sleep`s), user+sys | {lock_cpu:.2f} s ({lock_cpu / n * 1000:.2f} ms per lockrun) |")
    print(f"| Redis CPU, user+sys | {redis_cpu:.2f} s ({redis_cpu / (n * hold) * 1e6:.0f} µs per holder-second) |")
    print(f"| Redis commands (incl. those run inside scripts) | {cmds} ({cmds / wall:.0f}/s) |")


def parse_ts(s):
    return dt.datetime.strptime(s.replace("Z", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()


def contention(redis, tmp):
    print("\n### Contention: N contenders looping `lockrun --wait forever KEY -- true` for 8 s\n")
    print("| waiters | acquisitions | acq/s | handoff median ms | handoff p99 ms | Redis requests / acquisition | fairness (min/max per contender) |")
    print("|---|---|---|---|---|---|---|")
    for waiters in (1, 10, 100):
        key = f"cont-{waiters}"
        contenders = waiters + 1
        stop = time.monotonic() + 8
        events, counts, lock = [], [0] * contenders, threading.Lock()
        env = dict(ENV, LOCKRUN_LOG="debug", LOCKRUN_LOG_FORMAT="json")

        def worker(i):
            while time.monotonic() < stop:
                r = subprocess.run([BIN, "-r", redis.unix, "-w", "forever", key, "--", "true"],
                                   env=env, stderr=subprocess.PIPE, text=True)
                mine = []
                for line in r.stderr.splitlines():
                    try:
                        e = json.loads(line)
                    except ValueError:
                        continue
                    if e.get("message") in ("redis lock acquired, starting job", "releasing redis lock"):
                        kind = "r" if e["message"] == "releasing redis lock" else "a"
                        mine.append((parse_ts(e["timestamp"]), kind))
                with lock:
                    events.extend(mine)
                    counts[i] += r.returncode == 0

        before = redis.commandstats()
        wall = run_threads(worker, contenders, lambda i: (i,))
        d = delta(before, redis.commandstats(), TOP_LEVEL - {"info"})
        events.sort()
        handoffs, last_release = [], None
        for ts, kind in events:
            if kind == "r":
                last_release = ts
            elif last_release is not None:
                handoffs.append(ts - last_release)
                last_release = None
        total = sum(counts)
        print(f"| {waiters} | {total} | {total / wall:.0f} | {ms(statistics.median(handoffs))} | {ms(pct(handoffs, 99))} "
              f"| {sum(d.values()) / total:.2f} | {min(counts)}/{max(counts)} |")

    print("\n### Throughput: 10 contenders, each running `true` 50 times in turn\n")
    print("| tool | jobs | wall s | jobs/s |")
    print("|---|---|---|---|")
    flockfile = os.path.join(tmp, "flock-tp")
    open(flockfile, "w").close()
    results = {}
    for name, argv in [
        ("flock -w 60 FILE true", ["flock", "-w", "60", flockfile, "true"]),
        ("lockrun --wait 60s KEY -- true", [BIN, "-q", "-r", redis.unix, "-w", "60s", "tp", "--", "true"]),
    ]:
        def loop():
            for _ in range(50):
                subprocess.run(argv, env=ENV)
        wall = run_threads(loop, 10)
        results[name] = 500 / wall
        print(f"| {name} | 500 | {wall:.2f} | {500 / wall:.0f} |")
    a, b = results.values()
    print(f"\nlockrun throughput is {b / a:.2f}x flock's in the same run.")


# How often a waiter renews its ticket, which is also its poll (HEARTBEAT in src/app/turn.rs).
HEARTBEAT_S = 1.0


def waiting(redis, tmp):
    """Requests per acquisition when waiters wait long: N waiters and a holder loop `lockrun
    --wait forever KEY -- sleep 0.005` on one key. Each run sends SUBSCRIBE, an attempt on
    arrival, one attempt per HEARTBEAT_S it waits (renewing its ticket), the attempt the release
    hint wakes, and its release: 4 + its whole seconds of waiting. Counted at the server
    (commandstats) over a window that opens once every contender has had its turn (the queue
    has filled and gone round); the acquisitions and waits of the window come from the runs'
    logs."""
    window = 30
    print("\n### Waiting: N waiters on one key, each looping `lockrun --wait forever KEY -- sleep 0.005`\n")
    print("| waiters | acquisitions | acq/s | mean wait s | requests / acquisition | "
          "4 + mean whole seconds waited | SUBSCRIBE / acquisition |")
    print("|---|---|---|---|---|---|---|")
    for waiters in (10, 100, 300):
        key = f"waiting-{waiters}"
        contenders = waiters + 1
        stop = threading.Event()
        runs, lock = [], threading.Lock()  # (started, acquired) wall-clock seconds
        turns = [0] * contenders
        env = dict(ENV, LOCKRUN_LOG_FORMAT="json")

        def worker(i):
            while not stop.is_set():
                started = time.time()
                r = subprocess.run([BIN, "-r", redis.unix, "-w", "forever", key, "--", "sleep", "0.005"],
                                   env=env, stderr=subprocess.PIPE, text=True)
                for line in r.stderr.splitlines():
                    try:
                        e = json.loads(line)
                    except ValueError:
                        continue
                    if e.get("message") == "redis lock acquired, starting job":
                        with lock:
                            runs.append((started, parse_ts(e["timestamp"])))
                            turns[i] += 1

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(contenders)]
        for t in threads:
            t.start()
        while min(turns) == 0:
            time.sleep(0.2)
        before, w0 = redis.commandstats(), time.time()
        time.sleep(window)
        after, w1 = redis.commandstats(), time.time()
        stop.set()
        for t in threads:
            t.join()
        d = delta(before, after, TOP_LEVEL - {"info"})
        inside = [(s, a) for s, a in runs if w0 <= a < w1]
        waits = [a - s for s, a in inside]
        whole = statistics.mean(int(w // HEARTBEAT_S) for w in waits)
        n = len(inside)
        print(f"| {waiters} | {n} | {n / (w1 - w0):.0f} | {statistics.mean(waits):.2f} | {sum(d.values()) / n:.2f} "
              f"| {4 + whole:.2f} | {d.get('subscribe', 0) / n:.2f} |")
    print(WAITING_NOTES)


class Sampler:
    """One connection of our own on the server's unix socket, for `INFO` while a fleet runs
    (a redis-cli per sample would add a connection and a process each time)."""

    def __init__(self, sock):
        self.s = socket.socket(socket.AF_UNIX)
        self.s.connect(sock)
        self.f = self.s.makefile("rb")

    def info(self, section):
        self.s.sendall(f"INFO {section}\r\n".encode())
        size = int(self.f.readline()[1:])
        body = self.f.read(size + 2).decode()
        return dict(line.split(":", 1) for line in body.splitlines() if ":" in line and not line.startswith("#"))

    def cpu(self):
        """The server's CPU so far, user + sys, in seconds."""
        info = self.info("cpu")
        return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])

    def close(self):
        self.f.close()
        self.s.close()


# The fleet's line: a period that holds the job and its hosts' exits, the lease of the standby test
# (tests/cases/standby_fleet.rs), a job of 6 s.
FLEET_EVERY, FLEET_TTL, FLEET_JOB_S = "20s", "3s", 6
TICK_LOAD = os.path.join(ROOT, "target", "release", "examples", "tick-load")


def fleet_tick(redis, binary, hosts, standby, key, tmp, firing):
    """One tick: `hosts` lockruns with the same line fired over `firing` seconds (host i at
    i/hosts of it), as the cron daemons of as many hosts fire; returns the tick's figures."""
    ran = os.path.join(tmp, key + ".ran")
    argv = [binary, "-q", "-E", "0", "-r", redis.unix, "--every", FLEET_EVERY, "--ttl", FLEET_TTL,
            *(["--standby"] if standby else []), key, "--", "sh", "-c",
            f"echo ran >> '{ran}'; exec sleep {FLEET_JOB_S}"]
    sampler = Sampler(redis.sock)
    calls0 = redis.commandstats()
    cpu0 = sampler.cpu()
    procs = []
    t0 = time.monotonic()
    for i in range(hosts):
        wait = t0 + firing * i / hosts - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        procs.append(subprocess.Popen(argv, env=ENV, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL))
    fired = time.monotonic()
    # Held connections: from a second after the last host fired (it is starting, connecting, or on
    # its way out) until every lockrun is gone; the sampler's own left out.
    peak = 0
    while any(p.poll() is None for p in procs):
        if time.monotonic() >= fired + 1:
            peak = max(peak, int(sampler.info("clients")["connected_clients"]) - 1)
        time.sleep(0.05)
    gone = time.monotonic()
    cpu1 = sampler.cpu()
    sampler.close()
    d = delta(calls0, redis.commandstats(), TOP_LEVEL - {"info"})
    runs = len(open(ran).read().splitlines()) if os.path.exists(ran) else 0
    return {"fired": fired - t0, "requests": sum(d.values()), "by": d, "peak": peak,
            "cpu": cpu1 - cpu0, "runs": runs, "gone": gone - t0,
            "codes": sorted({p.returncode for p in procs})}


def fleet(redis, tmp):
    """N hosts on one healthy tick, with and without `--standby`: what the server is asked for,
    per tick. `BENCH_BASELINE` puts another build's rows beside this one's (a build of another
    commit, e.g. before a protocol change)."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    builds = [("this build", BIN)] + ([(BASELINE_LABEL, BASELINE)] if BASELINE else [])
    # What the server uses idle over a job's time, sampled as during a tick: the floor of the CPU
    # column.
    sampler = Sampler(redis.sock)
    cpu0 = sampler.cpu()
    stop = time.monotonic() + FLEET_JOB_S
    while time.monotonic() < stop:
        sampler.info("clients")
        time.sleep(0.05)
    idle = sampler.cpu() - cpu0
    sampler.close()
    print(f"\n### Fleet: N hosts on one tick, `lockrun -q -E 0 --every {FLEET_EVERY} --ttl {FLEET_TTL} "
          f"[--standby] KEY -- <{FLEET_JOB_S} s job>`\n")
    print("| build | hosts | `--standby` | fired over s | requests per tick | per host | "
          "peak connections mid-job | server CPU per tick ms | job runs | last exit s | exit codes |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for label, binary in builds:
        # The scripts loaded first, as a fleet's earlier ticks load them: a fresh server's NOSCRIPT
        # and EVAL are not what a tick costs.
        for standby in (False, True):
            fleet_tick(redis, binary, 3, standby, f"fleet-warm-{label}-{standby}", tmp, 0.2)
        for hosts in (10, 100, 1000):
            for standby in (False, True):
                key = f"fleet-{label}-{hosts}-{'standby' if standby else 'plain'}"
                r = fleet_tick(redis, binary, hosts, standby, key, tmp, 2.0 if hosts >= 1000 else 1.0)
                by = ", ".join(f"{v:g} {k.upper()}" for k, v in sorted(r["by"].items()))
                print(f"| {label} | {hosts} | {'yes' if standby else 'no'} | {r['fired']:.2f} | {r['requests']} ({by}) "
                      f"| {r['requests'] / hosts:.2f} | {r['peak']} | {r['cpu'] * 1000:.0f} | {r['runs']} "
                      f"| {r['gone']:.1f} | {r['codes']} |")
    print(FLEET_NOTES.format(idle=idle * 1000, job=FLEET_JOB_S))
    print(f"\n### Fleet, simulated: N hosts as tasks of one process (`examples/tick-load.rs`)\n")
    print("| hosts | `--standby` | connection | fired over s | requests per tick | per host | "
          "peak connections mid-job | server CPU per tick ms | µs per host above idle | job runs |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for hosts, firing, via in ((100, 1.0, "unix"), (1000, 2.0, "unix"), (10000, 1.0, "unix"),
                               (10000, 1.0, "tcp"), (10000, 2.0, "tcp")):
        for standby in (False, True):
            r = fleet_simulated(redis, hosts, standby, firing, via)
            # The server's own CPU while idle (its timers, the sampler) over the tick's time, less.
            busy = max(0.0, r["server_cpu_s"] - idle / FLEET_JOB_S * r["seconds"])
            print(f"| {hosts} | {'yes' if standby else 'no'} | {via} | {firing:g} | {r['requests']} "
                  f"| {r['requests'] / hosts:.2f} | {r['peak_connections']:.0f} "
                  f"| {r['server_cpu_s'] * 1000:.0f} | {busy * 1e6 / hosts:.0f} | {r['took']} |")
    print(FLEET_SIMULATED_NOTES)


def fleet_simulated(redis, hosts, standby, firing, via):
    """One healthy tick of `hosts` simulated hosts (examples/tick-load.rs), on its own key,
    connected `via` the server's unix socket or TCP on loopback."""
    redis.cmd("FLUSHALL")
    argv = [TICK_LOAD, redis.unix if via == "unix" else redis.tcp, str(hosts), "--fire-over", f"{firing}s", "--job", f"{FLEET_JOB_S}s",
            "--ttl", FLEET_TTL, "--every", FLEET_EVERY, *(["--standby"] if standby else [])]
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def cost_contenders(port):
    tcp = f"redis://127.0.0.1:{port}"
    return {
        "floor program (SET NX PX + INCR; GET + DEL)": [FLOOR, "127.0.0.1", str(port), "cost-floor", "true"],
        "lockrun (history on, the default)": [BIN, "-q", "-r", tcp, "cost-lockrun", "--", "true"],
        "lockrun --history 0": [BIN, "-q", "--history", "0", "-r", tcp, "cost-nohist", "--", "true"],
    }


def server_instructions(tmp, runs=100):
    """Instructions the server executes per lock cycle, counted by callgrind in the server's
    EVAL/EVALSHA commands: unlike microseconds on a shared VM, the same on every run, so a change
    to the scripts shows its exact effect. One redis-server under valgrind; per contender a
    first run (loads the scripts), counters zeroed, `runs` runs, counters dumped."""
    port = free_port()
    out = os.path.join(tmp, "callgrind.out")
    proc = subprocess.Popen(
        ["valgrind", "--tool=callgrind", "--collect-atstart=no", "--toggle-collect=evalShaCommand",
         "--toggle-collect=evalCommand", f"--callgrind-out-file={out}", "redis-server", "--port", str(port),
         "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", tmp],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        result = {}
        for name, argv in cost_contenders(port).items():
            subprocess.run(argv, env=ENV, check=True)
            subprocess.run(["callgrind_control", "-z", str(proc.pid)], check=True, capture_output=True)
            for _ in range(runs):
                subprocess.run(argv, env=ENV, check=True)
            before = set(os.listdir(tmp))
            subprocess.run(["callgrind_control", "-d", str(proc.pid)], check=True, capture_output=True)
            dump = next(os.path.join(tmp, f) for f in sorted(set(os.listdir(tmp)) - before)
                        if f.startswith("callgrind.out"))
            with open(dump) as f:
                total = next(int(line.split()[1]) for line in f if line.startswith(("summary:", "totals:")))
            result[name] = total / runs
        return result
    finally:
        proc.kill()
        proc.wait()


def servercost(redis, tmp):
    """Redis server time per uncontended lock cycle (acquire + release): `INFO commandstats`
    usec of the top-level script calls, interleaved in rounds so every contender sees the same
    server; the server's instructions per cycle (callgrind); and requests per run."""
    contenders = cost_contenders(redis.port)
    usec = {name: 0 for name in contenders}
    runs = {name: 0 for name in contenders}
    scripts = ("eval", "evalsha")
    for argv in contenders.values():  # the server caches every script once
        subprocess.run(argv, env=ENV, check=True)
    for _ in range(10):
        for name, argv in contenders.items():
            redis.cmd("CONFIG", "RESETSTAT")
            for _ in range(100):
                subprocess.run(argv, env=ENV)
            stats = redis.info("commandstats")
            usec[name] += sum(int(stats[f"cmdstat_{c}"].split("usec=")[1].split(",")[0])
                              for c in scripts if f"cmdstat_{c}" in stats)
            runs[name] += 100
    # Requests: the top-level commands each client sent (commandstats counts the commands a
    # script runs under their own names, so only the TOP_LEVEL ones are requests).
    requests = {}
    for name, argv in contenders.items():
        before = redis.commandstats()
        for _ in range(50):
            subprocess.run(argv, env=ENV)
        d = delta(before, redis.commandstats(), TOP_LEVEL - {"info"})
        requests[name] = sum(d.values()) / 50
    instructions = server_instructions(tmp)
    first = next(iter(contenders))
    floor = usec[first] / runs[first]
    print("\n### Redis server time per uncontended lock cycle (acquire + release)\n")
    print("| client | server µs per cycle | vs floor | server instructions per cycle | vs floor | requests per run |")
    print("|---|---|---|---|---|---|")
    for name in contenders:
        per = usec[name] / runs[name]
        ir = instructions[name]
        print(f"| {name} | {per:.1f} | {per / floor:.2f}x | {ir / 1000:.1f} k | {ir / instructions[first]:.2f}x "
              f"| {requests[name]:g} |")
    print(f"\n({runs[first]} cycles each, interleaved in rounds of 100; instructions counted by callgrind "
          "in the server's EVAL/EVALSHA over 100 cycles each.)")


def topologies(redis, tmp):
    sys.path.insert(0, os.path.dirname(__file__))
    import topo
    topo.topologies(tmp, BIN, ENV, free_port, hyperfine, ms, pct)


WAITING_NOTES = """
Counted at the server (`INFO commandstats`, the requests clients sent) over 30 s that start once
every contender has had its turn (the queue filled and went round); "mean wait" is from a run's
start to its acquire; "4 + mean whole seconds waited" is what the law in
[Contention](#contention) predicts for the runs of the window."""


FLEET_NOTES = """
One healthy tick per row: the hosts fire over 1 s (2 s for 1,000, so that starting them does not
swamp a 2-core machine), host i at i/N of it, as the cron daemons of N hosts fire, each a lockrun
process with its own connections. Requests: the commands the clients sent (`INFO commandstats`),
from the first host's start to the last one's exit; the scripts were loaded by a warm-up tick
first. Peak connections: `connected_clients` less the sampler's, every 50 ms from 1 s after the
last host fired until every lockrun was gone. Server CPU: `used_cpu_user` + `used_cpu_sys` over
the same time, the sampler's `INFO` included: the same server idle for {job} s, sampled alike,
used {idle:.0f} ms. "Last exit": from the first host's start."""

FLEET_SIMULATED_NOTES = """
The same line's hosts as tasks of one process, each with a lock client (and connection) of its
own, sending lockrun's own scripts through the crate's `LockService` as the binary's waiting loop
does (`examples/tick-load.rs`); counted as above, peak connections from 1 s after the last host
fired until the job's end. The 100 and 1,000 rows stand beside the processes' rows above (unix
socket, as they are): where both run, they agree. "µs per host above idle": the server's CPU for
the tick less what it uses idle over as long (measured above), over the hosts; over TCP, as a
fleet connects, a host costs more than over the socket (accepting and closing its connection).
What one server carries, from these rows, is in the notes on [fleet capacity](#fleet-capacity)."""


OVERHEAD_NOTES = """
"lockrun" rows: the shipped binary (static-pie glibc, `packaging/build-static.sh`); "dynamically
linked": `cargo build --release`; "fixed address": the same static build with
`-C relocation-model=static`, which ships no more (what position independence costs at start).
The **floor program** (`tests/bench/floor.c`) is the least a lock wrapper can do: TCP connect,
one `EVAL` that takes the lock (`SET NX PX`) and hands out a fence (`INCR`), fork + exec of the
command, `waitpid`, one `EVAL` that deletes the key if it is still ours; no renewal, no signals,
no logging. Read the ratios, not the milliseconds: every command runs interleaved with the others
in 50 rounds, so a VM that speeds up or slows down weighs on all alike. A binary whose pages came
into the page cache by being written (right after a build, as here) starts faster than one read
back from disk (after a package install and a reboot)."""


PARTS = ["overhead", "servercost", "roundtrips", "memory", "scale", "contention", "waiting", "topologies", "fleet"]
DOC = os.path.join(ROOT, "docs", "benchmarks.md")


def today():
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d")


def machine():
    return (f"Machine: {os.cpu_count()} cores, {os.uname().sysname} {os.uname().release}; "
            f"{subprocess.run(['redis-server', '--version'], capture_output=True, text=True).stdout.split()[2]}; "
            f"lockrun {subprocess.run([BIN, '--version'], capture_output=True, text=True).stdout.strip()} "
            f"({'static, packaging/build-static.sh' if BIN != BIN_DYNAMIC else 'cargo build --release'})")


def decisions():
    """The hand-written notes appended to the document (tests/bench/decisions.md)."""
    with open(os.path.join(os.path.dirname(__file__), "decisions.md")) as f:
        return f.read().rstrip()


def run_part(part, redis, tmp):
    """Prints one part's tables, between the markers by which `--update` finds them again."""
    print(f"\n<!-- part: {part} -->")
    globals()[part](redis, tmp) if part not in ("roundtrips", "scale") else globals()[part](redis)
    print(f"<!-- /part: {part} -->")


def update(parts, redis, tmp):
    """Measures `parts` again and puts their tables into docs/benchmarks.md in place of the old
    ones (between their markers), each saying when and where it was measured, and the notes of
    decisions.md as they are now."""
    doc = open(DOC).read()
    for part in parts:
        begin, end = f"\n<!-- part: {part} -->\n", f"<!-- /part: {part} -->\n"
        if begin not in doc or end not in doc:
            sys.exit(f"{DOC} has no markers for the part {part}: regenerate it whole (bash tests/bench/run.sh)")
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            run_part(part, redis, tmp)
        # The part's own date and machine, after its heading: it is newer than the rest.
        text = out.getvalue()
        heading_end = text.index("\n\n", text.index("###")) + 2
        text = (text[:heading_end] + f"Measured {today()} on its own, by `bash tests/bench/run.sh --update {part}`. "
                + machine() + "\n\n" + text[heading_end:])
        doc = doc[:doc.index(begin)] + text + doc[doc.index(end) + len(end):]
        print(text, end="")
    # The notes at the end, as decisions.md has them now (they may speak of the new tables).
    notes = decisions()
    doc = doc[:doc.index("\n" + notes.splitlines()[0] + "\n")] + "\n" + notes + "\n"
    with open(DOC + ".tmp", "w") as f:
        f.write(doc)
    os.replace(DOC + ".tmp", DOC)
    print(f"updated {DOC}: {', '.join(parts)}", file=sys.stderr)


def main():
    args = sys.argv[1:]
    updating = args[:1] == ["--update"]
    parts = (args[1:] if updating else args) or PARTS
    whole = not args
    unknown = [p for p in parts if p not in PARTS]
    if unknown or (updating and not args[1:]):
        sys.exit(f"parts: {' '.join(PARTS)} (unknown: {' '.join(unknown) or 'none given'})")
    if whole:
        print("# Benchmarks\n")
        print("<!-- Generated by `bash tests/bench/run.sh`; do not edit by hand (the notes at the end come from "
              "tests/bench/decisions.md). -->\n")
        print(f"Measured {today()} by `bash tests/bench/run.sh` "
              "(it installs hyperfine, GNU time, etcd, valgrind and a virtualenv with redis-py, "
              "python-redis-lock and pottery when missing). One part: `bash tests/bench/run.sh overhead` "
              f"(or {', '.join(PARTS[1:])}) prints its table only; `bash tests/bench/run.sh --update PART` "
              "measures it again into this document.\n")
    if not updating:
        print(machine())
    tmp = tempfile.mkdtemp(prefix="lockrun-bench-")
    redis = Redis(tmp)
    try:
        if updating:
            update(parts, redis, tmp)
        else:
            for part in parts:
                run_part(part, redis, tmp)
    finally:
        redis.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    if whole:
        print("\n" + decisions())


if __name__ == "__main__":
    main()
