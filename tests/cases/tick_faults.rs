//! What each fault of the lock server costs a `--every --standby` job: one test per fault, each
//! two consecutive ticks fired on three hosts (`support::ticks`), the fault in the first tick
//! while its job runs. Each run measures the ticks lost, the ticks run to their end twice, the
//! ticks run again after a stopped run, two jobs live at once and the takeover latency, and
//! checks the promise docs/guide.md makes for that fault ("What a server fault costs a tick"):
//! a tick runs at least once, its fault never costs the next tick, and two jobs live at once
//! only where a fault lost the lock's write (bounded as for any lock that a failover loses).
//!
//! The tick a run belongs to, and the hold that makes later hosts skip it, are the schedule's
//! (when the hosts fired), never moved by a takeover or by a tick record rebuilt after the
//! server lost it.
//!
//! Topologies: one server on loopback (restarts), a Cluster on loopback (`support::cluster`),
//! and a Sentinel-managed replica set in network namespaces (`support::netns_sentinel`: root;
//! those tests are named `ha_…`, so `--skip ha_` leaves them out), the hosts `h1`, `h2`, `h3`
//! each in a namespace of its own. `LOCKRUN_FAULTS_SCALE=N` runs each row N times;
//! `LOCKRUN_TICKS_REPORT=<file>` collects the rows (`bash tests/ha-table.sh --ticks`).

use crate::support::cluster::Cluster;
use crate::support::ha::{Runs, Topology};
use crate::support::netns_sentinel::Set;
use crate::support::server::{Binary, Server, ServerOptions};
use crate::support::ticks::{Again, Promise, Rows, Shape, Ticks, QUEUE, RECORD};
use crate::support::{ms, Lockrun, PATIENCE};
use std::thread;
use std::time::{Duration, Instant};

/// The bound docs/availability.md gives a lock that a fault lost ("When a failover loses the
/// key"): the holder's next renewal comes at most TTL/3 later, takes at most one request
/// timeout (TTL/3), and the job then has the grace (min(--kill-after, TTL/3)) to stop.
fn lost_write_bound(ttl: u64) -> Duration {
    ms(ttl / 3 * 3)
}

/// Loopback rows: `--every 10s --ttl 2s`, a 4 s job.
fn loopback(args: &[&str]) -> Shape {
    Shape {
        every: 10_000,
        ttl: 2000,
        job: 4000,
        args: args.iter().map(|a| a.to_string()).collect(),
    }
}

/// Sentinel rows: `--every 12s`, a 3 s job (the failover takes about 3 s of the tick).
fn sentinel(ttl: u64, args: &[&str]) -> Shape {
    Shape {
        every: 12_000,
        ttl,
        job: 3000,
        args: args.iter().map(|a| a.to_string()).collect(),
    }
}

/// Sentinel's `down-after-milliseconds` in these rows.
const DOWN_AFTER: u64 = 1000;

/// A server on loopback TCP (`binary`, `config`) SIGKILLed `into` ms into the job, once both
/// standbys stand by, and started again (from whatever it persisted); `args`: more lockrun
/// options. `snapshot`: an RDB snapshot (`SAVE`) is taken once the standbys stand by.
fn restarted_run(
    binary: Binary,
    config: &str,
    args: &[&str],
    into: u64,
    snapshot: bool,
) -> crate::support::ticks::Measure {
    let mut redis = Server::with(ServerOptions {
        binary,
        config: config.into(),
        ..ServerOptions::tcp()
    });
    let ticks = Ticks::new(loopback(args));
    let mut fired = ticks.fire(1, |_| Lockrun::on(&redis));
    ticks.wait_started(1);
    redis.wait_until("the two standbys queued", |s| {
        s.try_cmd::<usize>(&["ZCARD", QUEUE]) == Some(2)
    });
    if snapshot {
        let _: String = redis.cmd(&["SAVE"]);
    }
    thread::sleep(ms(into));
    ticks.fault("the server SIGKILLed and started again");
    redis.respawn(&[]);
    fired.extend(ticks.fire(2, |_| Lockrun::on(&redis)));
    ticks.measure(fired)
}

/// Redis (no persistence) killed 1 s into the job and started again empty: the winner stops
/// its job (its renewal finds the key gone), a standby opens the tick again and runs it, and
/// the next tick, fired 10 s after the first, runs exactly once.
#[test]
fn a_redis_restarted_empty_mid_tick_costs_neither_that_tick_nor_the_next() {
    let mut rows = Rows::new(
        "one server",
        "restarted empty (no persistence), 1 s into the job (TTL 2 s)",
        Promise {
            overlap: Some(lost_write_bound(2000)),
            again: Again::AfterAStop,
        },
    );
    for _ in 0..Runs::count(1) {
        let m = restarted_run(Binary::Default, "", &[], 1000, false);
        let tick1: Vec<_> = m.ended.iter().filter(|(t, _, _)| *t == 1).collect();
        // The winner stopped its job when its renewal found the key gone; the host that rebuilt
        // the tick says so in one line (cron mails it, -q or not).
        let stopped = tick1.iter().any(|(_, code, _)| *code == Some(76));
        let reopened = tick1
            .iter()
            .filter(|(_, _, err)| err.contains("the server lost the record of this tick"))
            .count();
        let explain = m.explain.clone();
        rows.add(m);
        assert!(stopped, "the winner's exit 76\n{explain}");
        assert_eq!(reopened, 1, "one WARN line for the rebuilt tick\n{explain}");
    }
    rows.finish();
}

/// Redis with `appendonly yes` and `appendfsync always` SIGKILLed 1 s into the job and
/// started again from its AOF: the lock, the tick's record and the queue are all back, the
/// winner's next renewal reconnects and finds its key, and nobody runs the tick again.
#[test]
fn a_redis_restarted_from_its_aof_mid_tick_costs_nothing() {
    let mut rows = Rows::new(
        "one server",
        "SIGKILLed and restarted from its AOF (`appendfsync always`), 1 s into the job (TTL 2 s)",
        Promise {
            overlap: None,
            again: Again::Never,
        },
    );
    for _ in 0..Runs::count(1) {
        rows.add(restarted_run(
            Binary::Default,
            "appendonly yes\nappendfsync always",
            &[],
            1000,
            false,
        ));
    }
    rows.finish();
}

/// Redis SIGKILLed 1 s into the job and started again from an RDB snapshot taken after the
/// acquire, once the standbys stood by (`SAVE`): the lock, the tick's record and the queue are
/// back with the expiries they had, as from an AOF, and nobody runs the tick again. (A snapshot
/// older than the tick is a restart empty for it: the row above.)
#[test]
fn a_redis_restarted_from_a_snapshot_of_the_tick_costs_nothing() {
    let mut rows = Rows::new(
        "one server",
        "SIGKILLed 1 s into the job and restarted from an RDB snapshot taken after the acquire (TTL 2 s)",
        Promise {
            overlap: None,
            again: Again::Never,
        },
    );
    for _ in 0..Runs::count(1) {
        rows.add(restarted_run(Binary::Default, "", &[], 1000, true));
    }
    rows.finish();
}

/// Valkey with `appendonly yes` and the default `appendfsync everysec`, SIGKILLed right after
/// the winner's job started and both standbys stood by, lockrun run with `--fsync`: the
/// acquire (and with it the tick's record) and each standby's place in the queue count only
/// once on disk (WAITAOF pipelined behind each script), and the restart brings them all back.
/// A SIGKILL loses nothing the server wrote (the kernel has it, fsynced or not): what `--fsync`
/// adds is for a crash of the machine, which this row does not simulate; it shows that the
/// standby protocol runs whole under `--fsync`, and what a restart from the AOF costs.
#[test]
fn a_valkey_restarted_from_its_aof_with_fsync_costs_nothing() {
    let mut rows = Rows::new(
        "one server (Valkey)",
        "SIGKILLed right after the acquire and restarted from its AOF (`appendfsync everysec`), `--fsync` (TTL 2 s)",
        Promise {
            overlap: None,
            again: Again::Never,
        },
    );
    for _ in 0..Runs::count(1) {
        rows.add(restarted_run(
            Binary::Valkey,
            "appendonly yes\nappendfsync everysec",
            &["--fsync"],
            0,
            false,
        ));
    }
    rows.finish();
}

/// Waits until a majority of the sentinels names another primary than `was`; returns its
/// index in `set.data`.
fn wait_failover(set: &Set, ticks: &Ticks, was: &Option<String>) -> usize {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let now = set.named();
        if let Some(named) = now.as_deref().filter(|_| now != *was) {
            ticks.fault(&format!("the sentinels' majority names {named}"));
            return set
                .data
                .iter()
                .position(|d| d.addr() == named)
                .unwrap_or_else(|| panic!("the sentinels name {named}, no data node"));
        }
        assert!(Instant::now() < deadline, "no failover within {PATIENCE:?}");
        thread::sleep(ms(50));
    }
}

/// When the primary is SIGKILLed: right after the winner's job started, or right after its
/// release.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Killed {
    AfterTheAcquire,
    AfterTheRelease,
}

/// The primary SIGKILLed (`when`). Without `--acks` the tick's writes before the kill (the
/// lock, the record, the queue; or the release's `done`) are made certain to be lost: the
/// primary is cut off from its replicas just before them (before the hosts fire; 300 ms
/// before the job ends), and healed once the sentinels name the promoted replica; the kill
/// comes before the sentinels could fail over by themselves (`down-after-milliseconds` 1 s),
/// so the clients talk to the old primary until it dies. With `--acks 1` there is no cut: the
/// acquire counted only once a replica had it.
fn failover_run(acks: bool, when: Killed) -> crate::support::ticks::Measure {
    let set = Set::start("", DOWN_AFTER, &["h1", "h2", "h3"]);
    let shape = if acks {
        // The lease outlasts the failover: the winner renews on the promoted replica.
        sentinel(6000, &["--acks", "1"])
    } else {
        sentinel(3000, &[])
    };
    let job = shape.job;
    let ticks = Ticks::new(shape);
    let named = set.named();
    let cut = |ticks: &Ticks| {
        set.net.partition(&[&["a"], &["b", "c"]]);
        ticks.fault("primary cut off from its replicas");
    };
    if !acks && when == Killed::AfterTheAcquire {
        cut(&ticks);
    }
    let mut fired = ticks.fire(1, |h| set.client(h));
    ticks.wait_started(1);
    let started = Instant::now();
    // The other two hosts stand by before the fault (a host that cannot reach Redis at its
    // first attempt exits 69 at once: not what this row is about).
    set.data[0].wait_until("the two standbys queued", |s| {
        s.try_cmd::<usize>(&["ZCARD", QUEUE]) == Some(2)
    });
    if when == Killed::AfterTheRelease {
        if !acks {
            thread::sleep((started + ms(job - 300)).saturating_duration_since(Instant::now()));
            cut(&ticks);
        }
        ticks.wait_logged("end", 1);
        // The release's reply, and the standbys woken by it, are a few ms behind the job's end.
        thread::sleep(ms(300));
    }
    set.data[0].kill();
    ticks.fault("primary SIGKILLed");
    let promoted = wait_failover(&set, &ticks, &named);
    if when == Killed::AfterTheRelease && !acks {
        // The fault is real: the promoted replica never heard of the `done`.
        let record: Option<String> = set.data[promoted].try_cmd(&["GET", RECORD]);
        assert!(
            record.as_deref().is_some_and(|r| r.starts_with("open ")),
            "the promoted replica's tick record: {record:?}"
        );
    }
    set.net.heal();
    fired.extend(ticks.fire(2, |h| set.client(h)));
    ticks.measure(fired)
}

#[test]
fn ha_a_sentinel_failover_that_loses_the_acquire_reruns_the_tick() {
    let mut rows = Rows::new(
        "Sentinel, 3 hosts",
        "primary SIGKILLed before the acquire replicated (TTL 3 s)",
        Promise {
            overlap: Some(lost_write_bound(3000)),
            again: Again::AfterAStop,
        },
    );
    for _ in 0..Runs::count(1) {
        rows.add(failover_run(false, Killed::AfterTheAcquire));
    }
    rows.finish();
}

#[test]
fn ha_a_sentinel_failover_with_acks_costs_nothing() {
    let mut rows = Rows::new(
        "Sentinel, 3 hosts",
        "primary SIGKILLed right after the acquire, `--acks 1` (TTL 6 s)",
        Promise {
            overlap: None,
            again: Again::Never,
        },
    );
    for _ in 0..Runs::count(1) {
        rows.add(failover_run(true, Killed::AfterTheAcquire));
    }
    rows.finish();
}

/// The primary SIGKILLed right after the winner's release, before the `done` it wrote reached a
/// replica: the promoted replica says the run is still under way, but the release had woken
/// every standby and they read `done` on the old primary and ended their runs. Nobody is left
/// to run the tick again, and the record on the promoted replica ends with the tick.
#[test]
fn ha_a_sentinel_failover_that_loses_the_release_costs_nothing() {
    let mut rows = Rows::new(
        "Sentinel, 3 hosts",
        "primary SIGKILLed right after the release, before it replicated (TTL 3 s)",
        Promise {
            overlap: None,
            again: Again::Never,
        },
    );
    for _ in 0..Runs::count(1) {
        rows.add(failover_run(false, Killed::AfterTheRelease));
    }
    rows.finish();
}

/// A partition `into` ms into the job (`groups` as
/// [`Net::partition`](crate::support::netns::Net)), healed once tick 1 has ended.
fn partition_run(groups: &[&[&str]], into: u64) -> crate::support::ticks::Measure {
    let set = Set::start("", DOWN_AFTER, &["h1", "h2", "h3"]);
    let shape = sentinel(3000, &[]);
    let every = shape.every;
    let ticks = Ticks::new(shape);
    let start = Instant::now();
    let mut fired = ticks.fire(1, |h| set.client(h));
    ticks.wait_started(1);
    thread::sleep(ms(into));
    set.net.partition(groups);
    ticks.fault(&format!("partition {groups:?}"));
    thread::sleep((start + ms(every * 9 / 10)).saturating_duration_since(Instant::now()));
    set.net.heal();
    ticks.fault("healed");
    fired.extend(ticks.fire(2, |h| set.client(h)));
    ticks.measure(fired)
}

/// The winner's host cut off from the primary (it still reaches two sentinels): its renewals
/// fail, it stops its job before its lease ends (76), and a standby takes the tick over once
/// the lease has expired.
#[test]
fn ha_the_winner_cut_off_from_the_primary_hands_the_tick_on() {
    let mut rows = Rows::new(
        "Sentinel, 3 hosts",
        "the winner's host cut off from the primary, 1 s into the job (TTL 3 s)",
        Promise {
            overlap: None,
            again: Again::AfterAStop,
        },
    );
    for _ in 0..Runs::count(1) {
        rows.add(partition_run(&[&["h1"], &["a"]], 1000));
    }
    rows.finish();
}

/// The winner's host cut off from the primary 200 ms before its job ends: the job completes,
/// but the release that would record the tick completed cannot reach Redis, so the record
/// still says the run is under way, and once the lease has expired a standby runs the tick
/// again, to its end (the one case where a tick runs twice; never two jobs at once).
#[test]
fn ha_the_winner_cut_off_from_the_primary_at_its_release_runs_the_tick_twice() {
    let mut rows = Rows::new(
        "Sentinel, 3 hosts",
        "the winner's host cut off from the primary 200 ms before its job ends (TTL 3 s)",
        Promise {
            overlap: None,
            again: Again::Twice,
        },
    );
    for _ in 0..Runs::count(1) {
        let m = partition_run(&[&["h1"], &["a"]], 2800);
        assert_eq!(m.twice, 1, "the tick ran to its end twice\n{}", m.explain);
        rows.add(m);
    }
    rows.finish();
}

/// The primary cut off from the replicas and the sentinels' majority, the winner with it: the
/// sentinels promote a replica (which has the lock, the record and the queue), the winner
/// stops its job (it reaches no primary that a majority names), and a standby on the majority
/// side takes the tick over on the promoted replica once the lease has expired there.
#[test]
fn ha_the_primary_cut_off_from_the_majority_hands_the_tick_on() {
    let mut rows = Rows::new(
        "Sentinel, 3 hosts",
        "primary cut off from the majority with the winner, 1 s into the job (TTL 3 s)",
        Promise {
            overlap: None,
            again: Again::AfterAStop,
        },
    );
    for _ in 0..Runs::count(1) {
        rows.add(partition_run(
            &[&["a", "h1"], &["b", "c", "h2", "h3"]],
            1000,
        ));
    }
    rows.finish();
}

/// The key's primary SIGKILLed 1 s into the job; the Cluster promotes its replica by itself
/// (`cluster-node-timeout` 1 s). On loopback the replica has the tick's writes (replication
/// beats the kill): the winner renews on the promoted replica and completes the tick. Were a
/// write lost, the row's bound is that of a lost lock.
#[test]
fn a_cluster_master_failover_mid_tick() {
    let mut rows = Rows::new(
        "Cluster, 3 shards × (primary + 1 replica)",
        "the key's primary SIGKILLed 1 s into the job (TTL 6 s)",
        Promise {
            overlap: Some(lost_write_bound(6000)),
            again: Again::AfterAStop,
        },
    );
    for _ in 0..Runs::count(1) {
        let cluster = Cluster::start_with_replicas(3, 1);
        let url = format!("redis+cluster://{}", cluster.seeds());
        let ticks = Ticks::new(Shape {
            every: 12_000,
            ttl: 6000,
            job: 4000,
            args: Vec::new(),
        });
        let mut fired = ticks.fire(1, |_| Lockrun::bare().url(&url));
        ticks.wait_started(1);
        thread::sleep(ms(1000));
        let key = cluster
            .all_keys()
            .into_iter()
            .next()
            .expect("the tick's keys");
        let owner = cluster.owner_of(&key);
        let replica = cluster.replica_of(&key);
        ticks.fault(&format!("the primary of {key} SIGKILLed"));
        owner.signal(libc::SIGKILL);
        replica.wait_until("promoted by the cluster", Server::is_master);
        ticks.fault("its replica promoted");
        fired.extend(ticks.fire(2, |_| Lockrun::bare().url(&url)));
        rows.add(ticks.measure(fired));
    }
    rows.finish();
}
