//! Redlock under real network partitions: 3 or 5 independent masters `m1`…`m5`, one
//! per host, each host a network namespace (support::netns); client hosts `h` (the holder),
//! `w` (a `--wait` lockrun that reaches every master) and `r` (a rival). A client's host is cut
//! off from a minority or from a majority of the masters; the test watches the masters through
//! their unix sockets, and the jobs report to the chaos recorder on the test's own loopback.
//! Each test is one row of the availability table (support::ha), its promise what availability.md
//! says (Several masters (Redlock)): a holder cut off from a minority keeps the lock, one cut
//! off from a majority is stopped before its lease ends (76), a rival cut off from a majority
//! never gets the lock (75 when a master it reaches says the lock is held, else 69).
//!
//! `LOCKRUN_FAULTS_SCALE=N` runs each scenario N times; `LOCKRUN_HA_REPORT=<file>` collects the
//! rows.

use crate::support::chaos::{Chaos, Job, Mode, Report};
use crate::support::ha::{Promise, Runs, Topology};
use crate::support::ms;
use crate::support::netns::{Net, Server};
use std::path::PathBuf;
use std::thread;

const PORT: u16 = 6379;
/// The lock's TTL in every scenario (the node timeout is TTL/10, renewals every TTL/3).
const TTL: u64 = 3000;

/// `n` independent masters on hosts `m1`…, and the client hosts `h`, `w`, `r`.
struct Masters {
    net: Net,
    nodes: Vec<Server>,
}

impl Masters {
    fn start(n: usize) -> Masters {
        let names: Vec<String> = (1..=n).map(|i| format!("m{i}")).collect();
        let hosts: Vec<&str> = names
            .iter()
            .map(String::as_str)
            .chain(["h", "w", "r"])
            .collect();
        let net = Net::new(&hosts);
        let nodes = names.iter().map(|m| net.redis(m, PORT, "")).collect();
        Masters { net, nodes }
    }

    /// The first `k` masters' hosts.
    fn first(&self, k: usize) -> Vec<&str> {
        self.nodes[..k]
            .iter()
            .map(|s| s.host.name.as_str())
            .collect()
    }

    fn majority(&self) -> usize {
        self.nodes.len() / 2 + 1
    }

    fn sockets(&self) -> Vec<PathBuf> {
        self.nodes.iter().map(|s| s.socket.clone()).collect()
    }
}

impl Topology for Masters {
    fn net(&self) -> &Net {
        &self.net
    }

    /// One per master: `-r redis://m1 -r redis://m2 …`.
    fn urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| format!("redis://{}", n.addr()))
            .collect()
    }
}

/// A rival that reached only a minority must not log that the lock holds on the majority
/// (that warning belongs to a holder whose majority carries on).
fn check_rival_said(ch: &Chaos, who: &str, text: &str) {
    if text.contains("the lock holds on the majority") {
        ch.problem(format!(
            "{who}, cut off from a majority, claimed the lock holds on the majority:\n{text}"
        ));
    }
}

fn topology(n: usize) -> String {
    format!("Redlock, {n} masters")
}

/// The holder's host is cut off from `cut` masters (both ways) a moment into its job; a
/// `--wait` lockrun on `w` (reaching every master) is queued behind it. Cut off from a
/// minority, the holder keeps the lock through several renewals and the cut is then healed;
/// cut off from a majority, it stays cut off until the holder has ended.
fn holder_cut_run(name: &str, n: usize, cut: usize) -> Report {
    let masters = Masters::start(n);
    let ch = Chaos::over(name, &masters.sockets());
    let key = ch.key("ha", Mode::Exclusive, ms(TTL));
    let ttl = format!("{TTL}ms");
    let keeps = cut < masters.majority();
    let hold = Job::hold(if keeps { 2 * TTL + 1000 } else { 3 * TTL }).writing_every(100);
    let holder = ch.spawn(
        masters.lockrun(&ch, "h", &["-t", &ttl, &key], &hold),
        if keeps { &[0] } else { &[76] },
    );
    ch.wait_begin(&holder);
    let waiter = ch.spawn(
        masters.lockrun(
            &ch,
            "w",
            &["--wait", "60s", "-t", &ttl, &key],
            &Job::hold(1000),
        ),
        &[0],
    );
    // Any phase of the holder's renewal cycle.
    let mut rng = ch.rng();
    thread::sleep(ms(rng.range(200, 200 + TTL / 3)));
    let cut_off = masters.first(cut);
    masters.net.partition(&[&["h"], &cut_off]);
    ch.fault(&format!("holder cut off from {}", cut_off.join(", ")));
    if keeps {
        // Three renewals or more while cut off.
        thread::sleep(ms(TTL + 500));
        masters.net.heal();
        ch.fault("healed");
    }
    ch.finish_noting(holder, "holder");
    masters.net.heal();
    ch.finish_noting(waiter, "waiter");
    ch.report_on(&masters.sockets())
}

fn holder_cut_row(n: usize, cut: usize) {
    let keeps = cut < n / 2 + 1;
    let side = if keeps { "minority" } else { "majority" };
    let name = format!("ha_redlock_cut_holder_from_{side}_{n}");
    let scenario = format!(
        "holder cut off from a {side} ({cut} of {n}) while it holds, a `--wait` lockrun reaching all (TTL 3 s)"
    );
    let mut runs = Runs::new(&topology(n), &scenario, Promise::NoOverlap);
    for _ in 0..Runs::count(1) {
        runs.add(holder_cut_run(&name, n, cut));
    }
    runs.finish();
}

#[test]
fn ha_redlock_cut_holder_from_minority_3() {
    holder_cut_row(3, 1);
}

#[test]
fn ha_redlock_cut_holder_from_minority_5() {
    holder_cut_row(5, 2);
}

#[test]
fn ha_redlock_cut_holder_from_majority_3() {
    holder_cut_row(3, 2);
}

#[test]
fn ha_redlock_cut_holder_from_majority_5() {
    holder_cut_row(5, 3);
}

/// A rival on `r`, cut off from a majority of the masters, while a holder on `h` (reaching
/// all) holds the lock: single attempts exit 75 (the masters it reaches say the lock is held),
/// so does a `--wait` that runs out; once the holder is gone, an attempt exits 69 (it reaches
/// no majority). It never gets the lock.
fn rival_cut_run(name: &str, n: usize) -> Report {
    let masters = Masters::start(n);
    let ch = Chaos::over(name, &masters.sockets());
    let key = ch.key("ha", Mode::Exclusive, ms(TTL));
    let ttl = format!("{TTL}ms");
    let cut_off = masters.first(masters.majority());
    masters.net.partition(&[&["r"], &cut_off]);
    ch.fault(&format!("rival cut off from {}", cut_off.join(", ")));
    let holder = ch.spawn(
        masters.lockrun(&ch, "h", &["-t", &ttl, &key], &Job::hold(2 * TTL)),
        &[0],
    );
    ch.wait_begin(&holder);
    let job = Job::hold(500);
    for _ in 0..2 {
        let rival = ch.spawn(masters.lockrun(&ch, "r", &["-t", &ttl, &key], &job), &[75]);
        let (_, said) = ch.finish_noting(rival, "rival");
        check_rival_said(&ch, "rival", &said);
    }
    let rival = ch.spawn(
        masters.lockrun(&ch, "r", &["--wait", "2s", "-t", &ttl, &key], &job),
        &[75],
    );
    let (_, said) = ch.finish_noting(rival, "rival --wait 2s");
    check_rival_said(&ch, "rival --wait 2s", &said);
    ch.finish_noting(holder, "holder");
    let rival = ch.spawn(masters.lockrun(&ch, "r", &["-t", &ttl, &key], &job), &[69]);
    ch.finish_noting(rival, "rival, the lock free");
    masters.net.heal();
    ch.report_on(&masters.sockets())
}

fn rival_cut_row(n: usize) {
    let name = format!("ha_redlock_cut_rival_from_majority_{n}");
    let scenario = format!(
        "rival cut off from a majority ({} of {n}): attempts while the lock is held, `--wait 2s`, one once it is free (TTL 3 s)",
        n / 2 + 1
    );
    let mut runs = Runs::new(&topology(n), &scenario, Promise::NoOverlap);
    for _ in 0..Runs::count(1) {
        runs.add(rival_cut_run(&name, n));
    }
    runs.finish();
}

#[test]
fn ha_redlock_cut_rival_from_majority_3() {
    rival_cut_row(3);
}

#[test]
fn ha_redlock_cut_rival_from_majority_5() {
    rival_cut_row(5);
}
