"""The `topologies` part of bench.py: one uncontended `lockrun KEY -- true` on every deployment
lockrun supports, side by side in one run, with the requests it costs the servers.

Every server is a throwaway local redis-server on loopback TCP (the same binary for all rows),
so the differences are lockrun's: what each topology adds to a run.
"""
import os
import shutil
import statistics
import subprocess
import time

# Commands lockrun's scripts run inside the server; everything else in commandstats was sent
# by a client (lockrun, its cluster/sentinel discovery). REPLCONF is the replica's own.
SCRIPT_INNER = {"replconf", "set", "get", "del", "pexpire", "pttl", "publish", "spublish", "time", "type", "exists",
                "incr", "zadd", "zcard", "zcount", "zrange", "zrangebyscore", "zrank", "zrem",
                "zremrangebyscore", "zscore", "xadd"}


class Node:
    def __init__(self, tmp, free_port, *extra, sentinel_conf=None):
        # A port from the kernel can still be taken before the server binds it, or be another
        # cluster node's bus port (port + 10000): then the server exits, and another is tried.
        for _ in range(5):
            if self.start(tmp, free_port(), extra, sentinel_conf):
                return
        raise RuntimeError("no redis-server started on 5 different ports")

    def start(self, tmp, port, extra, sentinel_conf):
        self.port = port
        self.sentinel = sentinel_conf is not None
        self.dir = os.path.join(tmp, f"node-{self.port}")
        os.makedirs(self.dir, exist_ok=True)
        if sentinel_conf is not None:
            conf = os.path.join(self.dir, "sentinel.conf")
            with open(conf, "w") as f:
                f.write(f"port {self.port}\n{sentinel_conf}\n")
            argv = ["redis-server", conf, "--sentinel"]
        else:
            argv = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                    "--appendonly", "no", "--repl-diskless-sync-delay", "0", *extra]
        self.proc = subprocess.Popen(argv + ["--dir", self.dir, "--logfile", "log"], cwd=self.dir,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(600):
            if self.cli("PING") == "PONG":
                return True
            if self.proc.poll() is not None:
                return False
            time.sleep(0.05)
        raise RuntimeError(f"node {self.port} never ready")

    def cli(self, *args):
        r = subprocess.run(["redis-cli", "-p", str(self.port), *map(str, args)], capture_output=True, text=True)
        return r.stdout.strip()

    def wait_until(self, cond, what="ready"):
        for _ in range(600):
            if cond():
                return
            time.sleep(0.05)
        raise RuntimeError(f"node {self.port} never {what}")

    def client_calls(self):
        if self.sentinel:
            # Sentinel keeps no commandstats: its total also counts the sentinels' own chatter
            # (a few commands a second), so this row slightly overstates.
            for line in self.cli("INFO", "stats").splitlines():
                if line.startswith("total_commands_processed:"):
                    return {"sentinel (any)": int(line.split(":")[1])}
            return {}
        calls = {}
        for line in self.cli("INFO", "commandstats").splitlines():
            if line.startswith("cmdstat_"):
                name, rest = line[len("cmdstat_"):].split(":", 1)
                if name not in SCRIPT_INNER and name != "info":
                    calls[name] = int(rest.split("calls=")[1].split(",")[0])
        return calls

    def stop(self):
        self.proc.kill()
        self.proc.wait()


def start_all(tmp, free_port):
    """name -> (lockrun arguments, nodes whose commands are counted, every node to stop)."""
    rows = {}
    one = Node(tmp, free_port)
    rows["one server"] = (["-r", f"redis://127.0.0.1:{one.port}"], [one], [one])

    master = Node(tmp, free_port)
    replica = Node(tmp, free_port, "--replicaof", "127.0.0.1", str(master.port))
    replica.wait_until(lambda: "master_link_status:up" in replica.cli("INFO", "replication"), "synced")
    rows["one server, `--acks 1` (one replica)"] = (
        ["-r", f"redis://127.0.0.1:{master.port}", "--acks", "1"], [master], [master, replica])

    smaster = Node(tmp, free_port)
    sreplica = Node(tmp, free_port, "--replicaof", "127.0.0.1", str(smaster.port))
    sreplica.wait_until(lambda: "master_link_status:up" in sreplica.cli("INFO", "replication"), "synced")
    conf = (f"sentinel monitor bench 127.0.0.1 {smaster.port} 2\n"
            "sentinel down-after-milliseconds bench 5000\n")
    sentinels = [Node(tmp, free_port, sentinel_conf=conf) for _ in range(3)]
    for s in sentinels:
        s.wait_until(lambda s=s: str(smaster.port) in s.cli("SENTINEL", "GET-MASTER-ADDR-BY-NAME", "bench"))
    url = "redis+sentinel://" + ",".join(f"127.0.0.1:{s.port}" for s in sentinels) + "/bench"
    rows["Sentinel (3 sentinels, primary + replica)"] = (
        ["-r", url], [smaster] + sentinels, [smaster, sreplica] + sentinels)

    cluster = [Node(tmp, free_port, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
               for _ in range(3)]
    subprocess.run(["redis-cli", "--cluster", "create", *[f"127.0.0.1:{n.port}" for n in cluster],
                    "--cluster-yes"], check=True, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    for n in cluster:
        n.wait_until(lambda n=n: "cluster_state:ok" in n.cli("CLUSTER", "INFO"), "saw the cluster ok")
    rows["Cluster (3 primaries)"] = (["-r", f"redis+cluster://127.0.0.1:{cluster[0].port}"], cluster, cluster)

    masters = [Node(tmp, free_port) for _ in range(3)]
    args = []
    for m in masters:
        args += ["-r", f"redis://127.0.0.1:{m.port}"]
    rows["Redlock (3 masters)"] = (args, masters, masters)
    return rows


def topologies(tmp, bin_path, env, free_port, hyperfine, ms, pct):
    rows = start_all(tmp, free_port)
    try:
        commands = {name: [bin_path, "-q", *args, "bench-topo", "--", "true"] for name, (args, _, _) in rows.items()}
        times = hyperfine(commands, 200)
        print("\n### Topologies: uncontended `lockrun -r URL KEY -- true`, each on local servers\n")
        print("| topology | median ms | p95 ms | vs one server | client requests per run, all servers |")
        print("|---|---|---|---|---|")
        base = statistics.median(times["one server"])
        for name, (args, counted, _) in rows.items():
            n = 100
            before = [node.client_calls() for node in counted]
            for _ in range(n):
                subprocess.run(commands[name], env=env, check=False)
            total = {}
            for node, b in zip(counted, before):
                for k, v in node.client_calls().items():
                    if v - b.get(k, 0):
                        total[k] = total.get(k, 0) + v - b.get(k, 0)
            parts = ", ".join(f"{v / n:g} {k.upper()}" for k, v in sorted(total.items()))
            ts = times[name]
            print(f"| {name} | {ms(statistics.median(ts))} | {ms(pct(ts, 95))} "
                  f"| {statistics.median(ts) / base:.2f}x | {sum(total.values()) / n:g} ({parts}) |")
    finally:
        for _, _, nodes in rows.values():
            for node in nodes:
                node.stop()
