//! `--standby` at fleet scale: 200 hosts with the same line (`lockrun -E 0 --every 20s --ttl 3s
//! --standby --history 1000 KEY -- job`, 200 real lockruns against one real redis-server over
//! loopback TCP) fire on one tick, spread over one second as cron daemons fire; the job lasts
//! 6 s, and the host that took the tick dies 2 s into it (lockrun and its job's group,
//! SIGKILL). The tick must still complete once, taken over within TTL + 2 s, no two jobs live
//! at once, every lockrun gone before the next tick; and a fleet must not cost the server what
//! 200 waiters do: at most N + 60 requests in all (`INFO commandstats`, the commands clients
//! send, the test's own left out) and at most 10 connections held while the job runs after the
//! last host fired (`connected_clients`, the test's own left out, sampled every 50 ms). The
//! scripts are loaded by a warm-up tick first (four hosts, the same death), as a fleet's
//! earlier ticks load them, so that each host's first `EVALSHA` is not followed by an `EVAL`
//! only a fresh server needs. `--history 1000` keeps every run of the tick for the check of
//! `history`. The harness is `support::fleet`.

use crate::support::fleet::Fleet;
use crate::support::*;
use std::time::Duration;

const HOSTS: usize = 200;

/// The tick: 200 hosts, a 6 s job, its host killed 2 s in, and `standbys_killed` standbys with
/// it; after a warm-up tick on another key of the same server.
fn fleet_tick(standbys_killed: usize) -> crate::support::fleet::Tick {
    let redis = Server::start_tcp();
    Fleet {
        hosts: 4,
        job_steps: 3,
        kill_after: Duration::from_millis(300),
        standbys_killed: 0,
    }
    .run(&redis, "fleet-warm-up");
    let tick = Fleet {
        hosts: HOSTS,
        job_steps: 6,
        kill_after: Duration::from_secs(2),
        standbys_killed,
    }
    .run(&redis, "fleet");
    eprintln!("{}", tick.summary());
    tick
}

#[test]
fn a_fleet_of_200_survives_its_winner_at_a_bounded_cost() {
    let tick = fleet_tick(0);
    let mut problems = tick.problems(Some(fleet::TTL_S + 2.0));
    problems.extend(tick.cost_problems());
    assert!(
        problems.is_empty(),
        "{} problems:\n{}\n{}",
        problems.len(),
        problems.join("\n"),
        tick.summary()
    );
}

/// The host that took the tick and the first standby found standing by die together: another
/// standby completes the tick.
#[test]
fn a_fleet_survives_its_winner_and_a_standby_dying_in_one_tick() {
    let tick = fleet_tick(1);
    assert_eq!(tick.standbys_killed.len(), 1, "no standby found to kill");
    let problems = tick.problems(None);
    assert!(
        problems.is_empty(),
        "{} problems:\n{}\n{}",
        problems.len(),
        problems.join("\n"),
        tick.summary()
    );
}
