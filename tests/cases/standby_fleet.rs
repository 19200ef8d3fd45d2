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

/// Fails with every problem found, and the tick's summary.
fn none_of(problems: &[String], tick: &fleet::Tick) {
    assert!(
        problems.is_empty(),
        "{} problems:\n{}\n{}",
        problems.len(),
        problems.join("\n"),
        tick.summary()
    );
}

#[test]
fn a_fleet_of_200_survives_its_winner_at_a_bounded_cost() {
    let tick = fleet_tick(0);
    let mut problems = tick.problems(Some(fleet::TTL_S + 2.0));
    problems.extend(tick.cost_problems());
    none_of(&problems, &tick);
}

/// The host that took the tick and the first standby found standing by die together: another
/// standby completes the tick.
#[test]
fn a_fleet_survives_its_winner_and_a_standby_dying_in_one_tick() {
    let tick = fleet_tick(1);
    assert_eq!(tick.standbys_killed.len(), 1, "no standby found to kill");
    let problems = tick.problems(None);
    none_of(&problems, &tick);
}

/// The checks themselves, on a tick made up by hand: each promise broken is named.
#[test]
fn standby_fleet_unit_checks() {
    use crate::support::cron_standby::Run;
    use crate::support::fleet::{Exit, Tick};
    use std::os::unix::process::ExitStatusExt;
    use std::process::ExitStatus;
    let run = |host: &str, fence, start: f64, end: Option<f64>| Run {
        host: host.into(),
        fence,
        start,
        steps: Vec::new(),
        end,
    };
    let exit = |host: &str, raw| Exit {
        host: host.into(),
        at: 110.0,
        status: ExitStatus::from_raw(raw),
    };
    let good = || Tick {
        fleet: Fleet {
            hosts: 3,
            job_steps: 6,
            kill_after: Duration::from_secs(2),
            standbys_killed: 0,
        },
        dir: tempfile::tempdir().unwrap(),
        first_fire: 100.0,
        last_fire: 101.0,
        winner: "h000".into(),
        killed_at: 102.0,
        standbys_killed: Vec::new(),
        runs: vec![
            run("h000", 1, 100.0, None),
            run("h001", 2, 105.0, Some(111.0)),
        ],
        exits: vec![
            exit("h000", libc::SIGKILL),
            exit("h001", 0),
            exit("h002", 0),
        ],
        leftover: Vec::new(),
        requests: [("evalsha".to_string(), 40)].into(),
        uncounted: Vec::new(),
        connections: vec![4, 5],
        server_cpu: 0.1,
        history: vec![serde_json::json!({"outcome": "ran", "exit_code": 0, "pid": 11})],
        pids: [("h000", 10), ("h001", 11), ("h002", 12)]
            .map(|(h, p)| (h.to_string(), p))
            .into(),
    };
    assert_eq!(good().problems(Some(5.0)), Vec::<String>::new());
    assert_eq!(good().cost_problems(), Vec::<String>::new());
    let says = |tick: Tick, what: &str| {
        let problems = [tick.problems(Some(5.0)), tick.cost_problems()].concat();
        assert!(
            problems.iter().any(|p| p.contains(what)),
            "{what:?} not in {problems:?}"
        );
    };
    let mut t = good();
    t.runs[1].start = 107.5;
    says(t, "taken over 5.50 s after the death");
    let mut t = good();
    t.runs.push(run("h002", 3, 110.0, Some(116.0)));
    says(t, "ran at once");
    let mut t = good();
    t.runs[1].end = None;
    says(t, "0 runs completed the tick");
    let mut t = good();
    t.runs[0].steps = vec![103.0];
    says(t, "the killed host's job went on");
    let mut t = good();
    t.leftover = vec!["h002".into()];
    says(t, "still running 20 s after");
    let mut t = good();
    t.exits[2] = exit("h002", 69 << 8);
    says(t, "1 hosts ended exit status: 69");
    let mut t = good();
    t.history[0]["pid"] = 12.into();
    says(t, "history: not one `ran` entry");
    let mut t = good();
    t.uncounted = vec!["get".into()];
    says(t, "commands the request count does not know");
    let mut t = good();
    t.requests = [("evalsha".to_string(), 64)].into();
    says(t, "64 requests in all, more than 63 (N + 60)");
    let mut t = good();
    t.connections = vec![4, 11, 5];
    says(t, "up to 11 connections held mid-job");
}
