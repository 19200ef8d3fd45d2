//! Sentinel under real network partitions and crashes: three hosts `a`, `b`, `c`,
//! each with one data node and one sentinel (the primary on `a`), and client hosts `h` (the
//! holder) and `w` (a `--wait` lockrun that reaches every host), each in its own network
//! namespace (support::netns). The test watches and steers the servers through unix sockets,
//! so no partition hides what they hold; the jobs report to the chaos recorder on the test's
//! own loopback. Each test is one row of the availability table (support::ha): its promise is
//! what docs/availability.md says for that case.
//!
//! `LOCKRUN_FAULTS_SCALE=N` runs each scenario N times; `LOCKRUN_HA_REPORT=<file>` collects the
//! rows.

use crate::support::chaos::{Chaos, Job, Mode, OnTerm, Report, Rng};
use crate::support::ha::{Promise, Runs, Topology};
use crate::support::netns::Net;
use crate::support::netns_sentinel::Set;
use crate::support::{ms, PATIENCE};
use std::thread;
use std::time::{Duration, Instant};

/// The lock's TTL in every scenario: its request timeout and loss grace are a third of it.
const TTL: u64 = 3000;
/// Sentinel's `down-after-milliseconds`: a failover starts about this long after a cut.
const DOWN_AFTER: u64 = 1000;
const PORT: u16 = 6379;

/// availability.md's bound on an overlap after a failover lost the lock (Availability, "When a
/// failover loses the key"): the holder's next renewal comes at most TTL/3 later, takes at
/// most one request timeout (TTL/3), and the job then has the grace (min(--kill-after, TTL/3))
/// to go.
fn lost_write_bound(ttl: u64) -> Duration {
    ms(ttl / 3 + ttl / 3 + ttl / 3)
}

/// Sleeps `d`, noting (in the fault log and on stderr) when a majority of the sentinels
/// starts naming another primary than `was`.
fn watch_failover(set: &Set, ch: &Chaos, since: Instant, d: Duration, was: &mut Option<String>) {
    let end = Instant::now() + d;
    while Instant::now() < end {
        let now = set.named();
        if now.is_some() && now != *was {
            let what = format!(
                "{:.0} ms after the fault: the sentinels' majority names {}",
                since.elapsed().as_secs_f64() * 1e3,
                now.as_deref().unwrap_or("-")
            );
            eprintln!("{}: {what}", ch.name);
            ch.fault(&what);
            *was = now;
        }
        thread::sleep(ms(50));
    }
}

/// Waits until a majority of the sentinels names another primary than `was` (noted as in
/// [`watch_failover`]).
fn wait_failover(set: &Set, ch: &Chaos, since: Instant, was: &mut Option<String>) {
    let before = was.clone();
    let deadline = Instant::now() + PATIENCE;
    while *was == before || was.is_none() {
        assert!(
            Instant::now() < deadline,
            "{}: no failover within {PATIENCE:?}",
            ch.name
        );
        watch_failover(set, ch, since, ms(50), was);
    }
}

/// Where the holder's host sits in the partition.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    /// With the primary (and one sentinel), cut off from the replicas and the other sentinels.
    Minority,
    /// With the replicas and two sentinels, cut off from the primary.
    Majority,
}

/// One partition scenario: the primary `a` cut off from `b` and `c` for `cut` while a holder
/// runs on `side`; a `--wait` lockrun on `w` (which reaches every host) queued behind it.
struct Partition {
    side: Side,
    cut: u64,
    /// `--acks 1` for both lockruns.
    acks: bool,
    /// Config lines for the data nodes (`min-replicas-to-write …`).
    config: &'static str,
}

fn partition_run(name: &str, p: &Partition) -> Report {
    let set = Set::start(p.config, DOWN_AFTER, &["h", "w"]);
    // Overlaps are measured here and judged by the scenario's promise (`Runs::finish`).
    let ch = Chaos::over(name, &set.sockets()).allowing_overlap();
    let key = ch.key("ha", Mode::Exclusive, ms(TTL));
    let ttl = format!("{TTL}ms");
    let acks: &[&str] = if p.acks { &["--acks", "1"] } else { &[] };
    let holder_args = [&["-t", ttl.as_str(), key.as_str()][..], acks].concat();
    let waiter_args = [&["--wait", "60s", "-t", &ttl, &key][..], acks].concat();
    // The holder's job spans the partition, and a while after it.
    let hold = Job::hold(p.cut + 3000).writing_every(100);
    let holder = ch.spawn(set.lockrun(&ch, "h", &holder_args, &hold), &[0, 76]);
    ch.wait_begin(&holder);
    // Long enough for any overlap to show whole (it cannot outlast the partition by more
    // than a few seconds).
    let waiter = ch.spawn(
        set.lockrun(&ch, "w", &waiter_args, &Job::hold(p.cut)),
        &[0, 76],
    );
    // Any phase of the holder's renewal cycle.
    let mut rng = ch.rng();
    thread::sleep(ms(rng.range(300, 300 + TTL / 3)));
    let mut named = set.named();
    match p.side {
        Side::Minority => set.net.partition(&[&["a", "h"], &["b", "c"]]),
        Side::Majority => set.net.partition(&[&["a"], &["b", "c", "h"]]),
    }
    let cut_at = Instant::now();
    ch.fault(&format!("partition for {} ms", p.cut));
    watch_failover(&set, &ch, cut_at, ms(p.cut), &mut named);
    set.net.heal();
    ch.fault("healed");
    watch_failover(&set, &ch, cut_at, ms(300), &mut named);
    ch.finish(holder);
    ch.finish(waiter);
    ch.report_on(&set.sockets())
}

fn partition_row(name: &str, scenario: &str, promise: Promise, p: &Partition) {
    let mut runs = Runs::new("Sentinel, 3 hosts", scenario, promise);
    for _ in 0..Runs::count(1) {
        runs.add(partition_run(name, p));
    }
    runs.finish();
}

#[test]
fn ha_sentinel_minority_holder_partition_longer_than_ttl() {
    partition_row(
        "ha_sentinel_minority_holder_partition_longer_than_ttl",
        "primary cut off 7 s with the holder (TTL 3 s)",
        Promise::NoOverlap,
        &Partition {
            side: Side::Minority,
            cut: 7000,
            acks: false,
            config: "",
        },
    );
}

#[test]
fn ha_sentinel_minority_holder_partition_shorter_than_ttl() {
    partition_row(
        "ha_sentinel_minority_holder_partition_shorter_than_ttl",
        "primary cut off 2 s with the holder (TTL 3 s)",
        Promise::NoOverlap,
        &Partition {
            side: Side::Minority,
            cut: 2000,
            acks: false,
            config: "",
        },
    );
}

#[test]
fn ha_sentinel_minority_holder_with_acks() {
    partition_row(
        "ha_sentinel_minority_holder_with_acks",
        "primary cut off 7 s with the holder, `--acks 1`",
        Promise::NoOverlap,
        &Partition {
            side: Side::Minority,
            cut: 7000,
            acks: true,
            config: "",
        },
    );
}

#[test]
fn ha_sentinel_minority_holder_min_replicas_default_lag() {
    partition_row(
        "ha_sentinel_minority_holder_min_replicas_default_lag",
        "primary cut off 7 s with the holder, `min-replicas-to-write 1`, max-lag 10",
        Promise::NoOverlap,
        &Partition {
            side: Side::Minority,
            cut: 7000,
            acks: false,
            config: "min-replicas-to-write 1",
        },
    );
}

#[test]
fn ha_sentinel_minority_holder_min_replicas_short_lag() {
    partition_row(
        "ha_sentinel_minority_holder_min_replicas_short_lag",
        "primary cut off 7 s with the holder, `min-replicas-to-write 1`, max-lag 1",
        Promise::NoOverlap,
        &Partition {
            side: Side::Minority,
            cut: 7000,
            acks: false,
            config: "min-replicas-to-write 1\nmin-replicas-max-lag 1",
        },
    );
}

#[test]
fn ha_sentinel_majority_holder_partition_longer_than_ttl() {
    partition_row(
        "ha_sentinel_majority_holder_partition_longer_than_ttl",
        "primary cut off 7 s, the holder with the replicas",
        Promise::NoOverlap,
        &Partition {
            side: Side::Majority,
            cut: 7000,
            acks: false,
            config: "",
        },
    );
}

/// The TTL where a failover must be able to beat the holder's deadline: the failover takes
/// about 3 s here (down-after-milliseconds 1 s, the election, the sentinels hearing of it),
/// longer than a 3 s lease lasts without renewals, and a lost lock then shows no overlap at
/// all.
const LONG_TTL: u64 = 6000;

/// The primary SIGKILLed right after the holder's acquire. Without `--acks` the write is made
/// certain to be lost: the primary is cut off from its replicas (and their sentinels) just
/// before the acquire and stays cut off until the sentinels name the promoted replica, so no
/// byte of it can reach them. With `--acks 1` there is no cut: the acquire counts only once a
/// replica has it.
fn killed_run(name: &str, acks: bool) -> Report {
    let set = Set::start("", DOWN_AFTER, &["h", "w"]);
    let ch = Chaos::over(name, &set.sockets()).allowing_overlap();
    let key = ch.key("ha", Mode::Exclusive, ms(LONG_TTL));
    let ttl = format!("{LONG_TTL}ms");
    let acks_args: &[&str] = if acks { &["--acks", "1"] } else { &[] };
    let holder_args = [&["-t", ttl.as_str(), key.as_str()][..], acks_args].concat();
    let waiter_args = [&["--wait", "60s", "-t", &ttl, &key][..], acks_args].concat();
    let mut named = set.named();
    let start = Instant::now();
    if !acks {
        set.net.partition(&[&["a"], &["b", "c"]]);
        ch.fault("primary cut off from its replicas");
    }
    // A job that takes 1.5 s to stop: the grace is part of the bound.
    let job = Job::hold(8000).on_term(OnTerm::Slow(1500));
    let holder = ch.spawn(
        set.lockrun(&ch, "h", &holder_args, &job),
        if acks { &[0, 76] } else { &[76] },
    );
    ch.wait_begin(&holder);
    set.data[0].kill();
    ch.fault("primary SIGKILLed");
    let waiter = ch.spawn(set.lockrun(&ch, "w", &waiter_args, &Job::hold(4000)), &[0]);
    wait_failover(&set, &ch, start, &mut named);
    set.net.heal();
    ch.finish(holder);
    ch.finish(waiter);
    // The dead primary holds nothing any more.
    ch.report_on(&set.sockets()[1..])
}

#[test]
fn ha_sentinel_primary_killed_after_acquire() {
    let mut runs = Runs::new(
        "Sentinel, 3 hosts",
        "primary SIGKILLed before the acquire replicated (TTL 6 s)",
        Promise::AtMost(lost_write_bound(LONG_TTL)),
    );
    for _ in 0..Runs::count(1) {
        runs.add(killed_run(
            "ha_sentinel_primary_killed_after_acquire",
            false,
        ));
    }
    runs.finish();
}

#[test]
fn ha_sentinel_primary_killed_after_acquire_with_acks() {
    let mut runs = Runs::new(
        "Sentinel, 3 hosts",
        "primary SIGKILLed right after the acquire, `--acks 1` (TTL 6 s)",
        Promise::NoOverlap,
    );
    for _ in 0..Runs::count(1) {
        runs.add(killed_run(
            "ha_sentinel_primary_killed_after_acquire_with_acks",
            true,
        ));
    }
    runs.finish();
}

/// A lock taken over on the cut-off primary (availability.md: the advice on max-lag).
/// The holder is on the majority side, so its key on the cut-off primary is no longer renewed
/// and expires there 2·TTL/3 to TTL after the cut; the sentinels take longer than the TTL to
/// fail over (down-after-milliseconds = TTL), so until then they still name the cut-off
/// primary, and the waiter on `w` (which reaches every host) acquires there once the key
/// expired, unless that primary refuses writes by then (`min-replicas-to-write 1` with
/// `min-replicas-max-lag` + 1 s < 2·TTL/3). That lock is lost in the failover: a third lockrun
/// on the majority side then acquires on the promoted replica, and the waiter's job runs until
/// its next renewal there finds the key gone.
fn takeover_run(name: &str, lag: u64, taken_over: bool) -> Report {
    let config = format!("min-replicas-to-write 1\nmin-replicas-max-lag {lag}");
    let set = Set::start(&config, LONG_TTL, &["h", "w"]);
    let ch = Chaos::over(name, &set.sockets()).allowing_overlap();
    let key = ch.key("ha", Mode::Exclusive, ms(LONG_TTL));
    let ttl = format!("{LONG_TTL}ms");
    let holder = ch.spawn(
        set.lockrun(&ch, "h", &["-t", &ttl, &key], &Job::hold(30_000)),
        &[76],
    );
    ch.wait_begin(&holder);
    let waiter = ch.spawn(
        set.lockrun(
            &ch,
            "w",
            &["--wait", "60s", "-t", &ttl, &key],
            &Job::hold(12_000),
        ),
        // Which side of the relation this is shows in the waiter's fate: with a max-lag too
        // long it takes the lock on the cut-off primary and loses it in the failover (76);
        // with one short enough that primary refuses it, and it acquires on the promoted
        // replica (0).
        if taken_over { &[76] } else { &[0] },
    );
    let mut rng = ch.rng();
    thread::sleep(ms(rng.range(300, 300 + LONG_TTL / 3)));
    let mut named = set.named();
    set.net.partition(&[&["a"], &["b", "c", "h"]]);
    let cut_at = Instant::now();
    ch.fault("primary cut off, the holder with the replicas");
    // The holder is stopped by its deadline (it reaches no primary the majority names).
    ch.finish(holder);
    let late = ch.spawn(
        set.lockrun(
            &ch,
            "h",
            &["--wait", "60s", "-t", &ttl, &key],
            &Job::hold(3000),
        ),
        &[0],
    );
    wait_failover(&set, &ch, cut_at, &mut named);
    set.net.heal();
    ch.fault("healed");
    ch.finish(late);
    ch.finish(waiter);
    ch.report_on(&set.sockets())
}

#[test]
fn ha_sentinel_takeover_on_cut_off_primary_max_lag_too_long() {
    let mut runs = Runs::new(
        "Sentinel, 3 hosts",
        "lock taken over on the cut-off primary before the failover, `min-replicas-to-write 1`, max-lag 10 (TTL 6 s)",
        Promise::AtMost(lost_write_bound(LONG_TTL)),
    );
    for _ in 0..Runs::count(1) {
        runs.add(takeover_run(
            "ha_sentinel_takeover_on_cut_off_primary_max_lag_too_long",
            10,
            true,
        ));
    }
    runs.finish();
}

#[test]
fn ha_sentinel_takeover_on_cut_off_primary_max_lag_short_enough() {
    let mut runs = Runs::new(
        "Sentinel, 3 hosts",
        "lock taken over on the cut-off primary before the failover, `min-replicas-to-write 1`, max-lag 2 (TTL 6 s)",
        Promise::NoOverlap,
    );
    for _ in 0..Runs::count(1) {
        runs.add(takeover_run(
            "ha_sentinel_takeover_on_cut_off_primary_max_lag_short_enough",
            2,
            false,
        ));
    }
    runs.finish();
}

/// How long after a cut a primary with `min-replicas-to-write 1` still accepts writes: `SET`
/// through its unix socket every 20 ms until refused (NOREPLICAS). Returns ms since the cut.
fn accepts_writes_for(lag: u64) -> u64 {
    let config = format!("min-replicas-to-write 1\nmin-replicas-max-lag {lag}");
    let net = Net::new(&["a", "b"]);
    let primary = net.redis("a", PORT, &config);
    let replica = net.redis(
        "b",
        PORT,
        &format!("replicaof {} {PORT}\n{config}", net.addr("a")),
    );
    replica.wait_until("finished its initial sync", |s| {
        s.replication().contains("master_link_status:up")
    });
    primary.wait_until("counted its replica online", |s| {
        s.replication().contains("state=online")
    });
    // Any moment of the replica's once-a-second acknowledgements.
    thread::sleep(ms(Rng::from_clock().range(0, 1000)));
    net.partition(&[&["a"], &["b"]]);
    primary.accepts_writes_since("probe", Instant::now())
}

/// The premise of availability.md's advice on `min-replicas-max-lag`: a primary cut off from its
/// replicas refuses writes within max-lag + 1 s of the cut (replicas acknowledge once a
/// second; the lag is counted in whole seconds).
#[test]
fn ha_sentinel_cut_off_primary_refuses_writes_within_max_lag_plus_1s() {
    for lag in [1, 2] {
        let took = accepts_writes_for(lag);
        eprintln!("min-replicas-max-lag {lag}: writes accepted for {took} ms after the cut");
        // 300 ms for this VM's scheduling and the 20 ms polling.
        assert!(
            took <= lag * 1000 + 1300,
            "min-replicas-max-lag {lag}: writes accepted for {took} ms after the cut"
        );
    }
}
