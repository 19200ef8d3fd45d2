//! Redlock under faults, each scenario one row of availability.md's table
//! (`support::ha`): masters restarted empty or from their append-only file mid-lease, masters
//! down longer than the TTL, masters' clocks stepped past the TTL (`support::clockshim`), on 3
//! and 5 loopback masters. Each master also listens on a unix socket, for the checker.

use crate::support::chaos::{Chaos, Job, Mode};
use crate::support::clockshim::{self, Clock};
use crate::support::ha::{Promise, Runs};
use crate::support::*;
use std::path::PathBuf;
use std::thread;
use std::time::{Duration, Instant};

/// The lease of every scenario: node timeout 200 ms, renewals every 667 ms, a grace of 667 ms
/// (TTL/3) between SIGTERM and SIGKILL when the lock is lost.
const TTL: Duration = Duration::from_secs(2);
const TTL_ARG: &str = "2s";
/// The holder's job: long enough for several renewals after the fault.
const HOLD_MS: u64 = 3000;

/// What availability.md bounds an overlap by when a majority of the masters lose the key mid-lease
/// (restarted empty, or their clocks stepped past the TTL): the holder's next renewal comes at
/// most TTL/3 later, takes at most one node timeout to find the key gone on a majority, and
/// the job is gone at most one grace (min(--kill-after, TTL/3)) after that.
fn majority_loss_bound() -> Duration {
    TTL / 3 + TTL / 10 + TTL / 3
}

/// One run's masters, each with its own clock (at offset 0 until a scenario steps it).
struct Masters {
    nodes: Vec<Server>,
    clocks: Vec<Clock>,
}

impl Masters {
    fn start(n: usize, extra: &[&str]) -> Masters {
        let clocks: Vec<Clock> = (0..n).map(|_| Clock::new(0)).collect();
        let nodes = clocks
            .iter()
            .map(|c| {
                Server::with(ServerOptions {
                    args: extra.iter().map(|a| a.to_string()).collect(),
                    env: c.env(),
                    ..ServerOptions::default()
                })
            })
            .collect();
        Masters { nodes, clocks }
    }

    fn sockets(&self) -> Vec<PathBuf> {
        self.nodes.iter().map(|r| r.socket.clone()).collect()
    }
}

/// The faults a scenario injects into `m` while the first holder's job runs.
type Fault<'a> = &'a (dyn Fn(&Chaos, &mut Masters) + Sync);

/// One run: a holder (its job `HOLD_MS`) and, once it is in, a rival that waits for the lock;
/// then `fault`. `holder`: the holder's expected exit codes (0, or 76 when it loses the lock);
/// the rival always gets the lock in the end (0).
fn run_once(name: &str, m: &mut Masters, args: &[&str], holder: &[i32], fault: Fault) -> Chaos {
    let ch = Chaos::over(name, &m.sockets()).allowing_overlap();
    let key = ch.key("hk", Mode::Exclusive, TTL);
    let mut cmd = redlock(&m.nodes);
    cmd.args(["-t", TTL_ARG]).args(args).arg(&key).arg("--");
    cmd.args(ch.job(&Job::hold(HOLD_MS)));
    let first = ch.spawn(cmd, holder);
    assert!(
        ch.recorder
            .wait_until(PATIENCE, |s| s.iter().any(|s| s.key == key)),
        "{name}: the first holder never started its job"
    );
    let mut cmd = redlock(&m.nodes);
    cmd.args(["-t", TTL_ARG, "--wait", "20s"])
        .args(args)
        .arg(&key)
        .arg("--");
    cmd.args(ch.job(&Job::hold(300)));
    let rival = ch.spawn(cmd, &[0]);
    thread::sleep(Duration::from_millis(300));
    fault(&ch, m);
    ch.finish(first);
    ch.finish(rival);
    ch
}

/// `runs` runs of one scenario on fresh masters, one row.
#[allow(clippy::too_many_arguments)]
fn scenario(
    topology: &str,
    name: &str,
    promise: Promise,
    masters: usize,
    extra: &[&str],
    args: &[&str],
    holder: &[i32],
    fault: Fault,
) {
    let mut runs = Runs::new(topology, name, promise);
    for _ in 0..Runs::count(1) {
        let mut m = Masters::start(masters, extra);
        let ch = run_once(name, &mut m, args, holder, fault);
        let report = ch.report_on(&m.sockets());
        runs.add(report);
    }
    runs.finish();
}

fn topology(n: usize) -> String {
    format!("Redlock, {n} masters (TTL {TTL_ARG})")
}

/// Restarts masters `which` empty (no persistence): they forget the key.
fn restart(which: &'static [usize]) -> impl Fn(&Chaos, &mut Masters) + Sync {
    move |ch, m| {
        for &i in which {
            ch.fault(&format!("master {i} restarted"));
            ch.restart_redis(&mut m.nodes[i], &[]);
        }
    }
}

/// Steps the clocks of masters `which` past the TTL (by TTL + 1 s): the key expires there at
/// once. Checked on each: the server's `TIME` moved, and a probe key's `PTTL` shrank by it.
fn step_clocks(which: &'static [usize]) -> impl Fn(&Chaos, &mut Masters) + Sync {
    move |ch, m| {
        let step = TTL.as_millis() as i64 + 1000;
        for &i in which {
            let r = &m.nodes[i];
            r.cmd::<()>(&["SET", "probe", "x", "PX", "60000"]);
            m.clocks[i].step_to(step);
            ch.fault(&format!("master {i}'s clock stepped {step} ms ahead"));
            clockshim::assert_offset(&r.cmd::<Vec<String>>(&["TIME"]), step);
            let pttl: i64 = r.cmd(&["PTTL", "probe"]);
            assert!(
                (60_000 - step - 500..=60_000 - step).contains(&pttl),
                "master {i}: PTTL {pttl} after a step of {step} ms"
            );
            r.cmd::<()>(&["DEL", "probe"]);
        }
        ch.lease_ended("hk");
    }
}

/// `lockrun -r <url> -r <url> …`, one `-r` per master.
fn redlock(nodes: &[Server]) -> Lockrun {
    Lockrun::to(&nodes.iter().map(Server::url).collect::<Vec<_>>())
}

#[test]
fn ha_redlock_two_stalled_masters_of_3_cost_one_node_timeout_and_one_give_back() {
    // 2 of 3 masters SIGSTOPped: no majority. Each master's connect and request share one
    // --node-timeout, and giving back what the attempt may have taken costs one more (the
    // stopped masters may have run it: their reply is what is missing). Nothing else: before,
    // the caller cleaned up again after Redlock's own give-back, a third node timeout (3.0 s
    // at the default TTL of 30 s; 1.8 s here).
    let nodes: Vec<Server> = (0..3).map(|_| Server::start()).collect();
    kill(nodes[0].pid(), libc::SIGSTOP);
    kill(nodes[1].pid(), libc::SIGSTOP);
    let mut cmd = redlock(&nodes);
    // TTL 6 s: node timeout 600 ms.
    cmd.args(["-t", "6s", "stalled", "--", "echo", "ran"]);
    let started = Instant::now();
    let out = run(cmd);
    let took = started.elapsed();
    kill(nodes[0].pid(), libc::SIGCONT);
    kill(nodes[1].pid(), libc::SIGCONT);
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(69), "{err}");
    assert_eq!(stdout_of(&out), "");
    assert!(
        took >= Duration::from_millis(1150) && took < Duration::from_millis(1650),
        "two node timeouts of 600 ms: took {took:?}\n{err}"
    );
    for (i, r) in nodes.iter().enumerate() {
        // The stopped masters run the acquire when they wake, and the give-back (on another
        // connection, so possibly first: then the key expires by its TTL).
        eventually(&format!("no key left on master {i}"), || {
            !r.exists("stalled")
        });
    }
}

#[test]
fn ha_redlock_one_master_restarted_empty_mid_lease() {
    for n in [3, 5] {
        scenario(
            &topology(n),
            "one master restarted empty mid-lease",
            Promise::NoOverlap,
            n,
            &[],
            &[],
            &[0],
            &restart(&[0]),
        );
    }
}

#[test]
fn ha_redlock_two_masters_restarted_empty_mid_lease() {
    // 3 masters: two forget the key, a majority: the rival gets it there while the holder
    // runs, until the holder's next renewal finds it gone and stops the job (documented).
    scenario(
        &topology(3),
        "two masters restarted empty mid-lease (documented overlap)",
        Promise::AtMost(majority_loss_bound()),
        3,
        &[],
        &[],
        &[76],
        &restart(&[0, 1]),
    );
    // 5 masters: two are a minority; three are a majority again.
    scenario(
        &topology(5),
        "two masters restarted empty mid-lease",
        Promise::NoOverlap,
        5,
        &[],
        &[],
        &[0],
        &restart(&[0, 1]),
    );
    scenario(
        &topology(5),
        "three masters restarted empty mid-lease (documented overlap)",
        Promise::AtMost(majority_loss_bound()),
        5,
        &[],
        &[],
        &[76],
        &restart(&[0, 1, 2]),
    );
}

/// Whether the server offers `WAITAOF` (Redis 7.2+, Valkey 8+): what `--fsync` needs.
fn has_waitaof(r: &Server) -> bool {
    let info: redis::Value = r.cmd(&["COMMAND", "INFO", "WAITAOF"]);
    !matches!(info, redis::Value::Array(ref v) if v.iter().all(|x| *x == redis::Value::Nil))
}

#[test]
fn ha_redlock_two_masters_with_appendfsync_always_restarted_mid_lease() {
    const AOF: &[&str] = &["--appendonly", "yes", "--appendfsync", "always"];
    // --fsync where the server has WAITAOF (Valkey 8); on Redis 7.0 lockrun refuses it, and
    // that refusal is checked here rather than the scenario skipped.
    let probe = Masters::start(3, AOF);
    let fsync = has_waitaof(&probe.nodes[0]);
    if !fsync {
        let mut cmd = redlock(&probe.nodes);
        cmd.args(["--fsync", "fs", "--", "true"]);
        let out = run(cmd);
        let err = stderr_of(&out);
        assert_eq!(out.status.code(), Some(69), "{err}");
        assert!(err.contains("--fsync needs WAITAOF"), "{err}");
    }
    drop(probe);
    let (name, args): (&str, &[&str]) = if fsync {
        (
            "two masters (appendonly, appendfsync always) killed and restarted mid-lease, --fsync",
            &["--fsync"],
        )
    } else {
        ("two masters (appendonly, appendfsync always) killed and restarted mid-lease (no --fsync: the server has no WAITAOF)", &[])
    };
    scenario(
        &topology(3),
        name,
        Promise::NoOverlap,
        3,
        AOF,
        args,
        &[0],
        &restart_persisted(&[0, 1]),
    );
}

/// [`restart`] of masters that persist every write (`appendfsync always`): each must come
/// back with the holder's key, which the test checks.
fn restart_persisted(which: &'static [usize]) -> impl Fn(&Chaos, &mut Masters) + Sync {
    move |ch, m| {
        for &i in which {
            let before: Option<String> = m.nodes[i].cmd(&["GET", "hk"]);
            ch.fault(&format!(
                "master {i} killed and restarted from its append-only file"
            ));
            m.nodes[i].stop();
            m.nodes[i].respawn(&[]);
            let after: Option<String> = m.nodes[i].cmd(&["GET", "hk"]);
            assert!(before.is_some(), "master {i} did not have the key before");
            assert_eq!(before, after, "master {i} lost the key in its restart");
        }
    }
}

/// Kills masters `which`, keeps them down for longer than the TTL, restarts them empty.
fn down_past_the_ttl(which: &'static [usize]) -> impl Fn(&Chaos, &mut Masters) + Sync {
    move |ch, m| {
        for &i in which {
            ch.fault(&format!("master {i} killed"));
            m.nodes[i].stop();
        }
        thread::sleep(TTL + Duration::from_millis(500));
        for &i in which {
            ch.fault(&format!("master {i} restarted empty after the TTL"));
            ch.restart_redis(&mut m.nodes[i], &[]);
        }
    }
}

#[test]
fn ha_redlock_masters_down_longer_than_the_ttl_then_restarted_empty() {
    scenario(
        &topology(3),
        "one master down longer than the TTL, restarted empty",
        Promise::NoOverlap,
        3,
        &[],
        &[],
        &[0],
        &down_past_the_ttl(&[0]),
    );
    // No majority while two are down: the holder cannot renew and stops its job before its
    // lease can end (76); the rival gets the lock once they are back.
    scenario(
        &topology(3),
        "two masters down longer than the TTL, restarted empty",
        Promise::NoOverlap,
        3,
        &[],
        &[],
        &[76],
        &down_past_the_ttl(&[0, 1]),
    );
}

#[test]
fn ha_redlock_one_masters_clock_stepped_past_the_ttl() {
    for n in [3, 5] {
        scenario(
            &topology(n),
            "one master's clock stepped past the TTL mid-lease",
            Promise::NoOverlap,
            n,
            &[],
            &[],
            &[0],
            &step_clocks(&[0]),
        );
    }
}

#[test]
fn ha_redlock_a_majority_of_clocks_stepped_past_the_ttl() {
    scenario(
        &topology(3),
        "two masters' clocks stepped past the TTL mid-lease (documented overlap)",
        Promise::AtMost(majority_loss_bound()),
        3,
        &[],
        &[],
        &[76],
        &step_clocks(&[0, 1]),
    );
    scenario(
        &topology(5),
        "two masters' clocks stepped past the TTL mid-lease",
        Promise::NoOverlap,
        5,
        &[],
        &[],
        &[0],
        &step_clocks(&[0, 1]),
    );
}
