//! Redlock under faults, each scenario one row of the README's availability table
//! (`support::ha`): masters restarted empty or from their append-only file mid-lease, masters
//! down longer than the TTL, masters' clocks stepped past the TTL (`support::clockshim`), on 3
//! and 5 loopback masters. Each master also listens on a unix socket, for the checker.

use crate::support::*;
use std::process::Command;
use std::time::{Duration, Instant};

/// `lockrun -r <url> -r <url> …`, one `-r` per master.
fn redlock(nodes: &[Redis]) -> Command {
    let mut cmd = bare_lockrun();
    for r in nodes {
        cmd.arg("-r").arg(r.url());
    }
    cmd
}

#[test]
fn ha_redlock_two_stalled_masters_of_3_cost_one_node_timeout_and_one_give_back() {
    // 2 of 3 masters SIGSTOPped: no majority. Each master's connect and request share one
    // --node-timeout, and giving back what the attempt may have taken costs one more (the
    // stopped masters may have run it: their reply is what is missing). Nothing else: before,
    // the caller cleaned up again after Redlock's own give-back, a third node timeout (3.0 s
    // at the default TTL of 30 s; 1.8 s here).
    let nodes: Vec<Redis> = (0..3).map(|_| Redis::start()).collect();
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
        took >= Duration::from_millis(1150) && took < Duration::from_millis(1500),
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
