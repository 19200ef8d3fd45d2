//! Fault injection: many real lockruns against a real redis-server while things break; the
//! jobs report their critical sections and writes to a fenced toy resource, and
//! `support::chaos` checks the history (no overlap, fences, exit codes, no panic, no key left).
//!
//! Each test prints `scenario=<name> seed=<n>` and one results line; replay a failure's random
//! choices with `LOCKRUN_FAULTS_SEED=<n>`, run longer with `LOCKRUN_FAULTS_SCALE=10`, collect
//! the results table with `LOCKRUN_FAULTS_REPORT=<file>`:
//!
//! `LOCKRUN_FAULTS_SCALE=10 LOCKRUN_FAULTS_REPORT=faults.md cargo test --test lockrun faults_`
//!
//! Sleeps here only schedule faults (when to strike, how long a pause lasts); whatever a check
//! depends on is awaited as an event (a job's begin or write, a log line, an exit).

use crate::support::chaos::{self, Chaos, Job, Mode, OnTerm, Rng, Running, Section};
use crate::support::*;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

/// How long each soak runs at scale 1.
const SOAK: Duration = Duration::from_secs(4);

/// One round of a soak contender: a short hold, or (with probability `long`) one that spans
/// several renewals; a TTL from `ttls`.
fn soak_round(
    rng: &mut Rng,
    key: &str,
    ttls: &[u64],
    long: f64,
    extra: &[&str],
) -> (Vec<String>, Job) {
    let ttl = *rng.pick(ttls).unwrap();
    let hold = if rng.chance(long) {
        rng.range(ttl * 2 / 3, ttl * 2)
    } else {
        rng.range(5, 60)
    };
    let mut args: Vec<String> = ["--wait", "5s", "-t", &format!("{ttl}ms")]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    args.push(key.to_string());
    (args, Job::hold(hold).writing_every(40))
}

/// The section of the job run by process `pid` (a lockrun, or the job itself when the
/// checker's self-test runs a job without lockrun).
fn ran_by(s: &Section, pid: u32) -> bool {
    s.lockrun == pid as i32 || s.pid == pid as i32
}

/// Waits for the job of lockrun `lr` to begin its critical section.
fn wait_begin(ch: &Chaos, lr: &Running) {
    let pid = lr.pid;
    let begun = ch
        .recorder
        .wait_until(PATIENCE, |s| s.iter().any(|s| ran_by(s, pid)));
    assert!(
        begun,
        "scenario={} seed={}: the job of lockrun {pid} never began; stderr:\n{}",
        ch.name,
        ch.seed,
        lr.log.text()
    );
}

/// When the job of lockrun `pid` was gone (waiting up to `limit` for it).
fn job_gone(ch: &Chaos, pid: u32, limit: Duration) -> Option<Instant> {
    ch.recorder.wait_until(limit, |s| {
        s.iter().any(|s| ran_by(s, pid) && s.gone().is_some())
    });
    ch.recorder
        .sections()
        .iter()
        .find(|s| ran_by(s, pid))
        .and_then(|s| s.gone())
}

fn share(report: &chaos::Report, code: i32) -> f64 {
    let total: usize = report.codes.values().sum();
    *report.codes.get(&code).unwrap_or(&0) as f64 / total.max(1) as f64
}

#[test]
fn faults_soak_exclusive() {
    let redis = Server::start();
    let ch = Chaos::new("faults_soak_exclusive", &redis);
    let ttls = [300, 450, 600];
    let key = ch.key("soak", Mode::Exclusive, ms(600));
    let until = Instant::now() + ch.scaled_duration(SOAK);
    // 76 is tolerated: a starved CI machine may miss renewals of a 300 ms lease, and losing
    // the lock safely is correct then; overlaps and fences are what must never break.
    ch.contenders(&redis, 8, until, &[0, 75, 76], |_, rng| {
        soak_round(rng, &key, &ttls, 0.25, &[])
    });
    let mut r = ch.report(&redis);
    r.require(
        r.sections >= 8,
        "too few critical sections to mean anything",
    );
    r.require(share(&r, 0) >= 0.5, "most rounds should simply succeed");
    r.assert();
}

#[test]
fn faults_soak_limit3() {
    let redis = Server::start();
    let ch = Chaos::new("faults_soak_limit3", &redis);
    let ttls = [300, 450, 600];
    let key = ch.key("pool", Mode::Limit(3), ms(600));
    let until = Instant::now() + ch.scaled_duration(SOAK);
    ch.contenders(&redis, 8, until, &[0, 75, 76], |_, rng| {
        soak_round(rng, &key, &ttls, 0.25, &["--limit", "3"])
    });
    let mut r = ch.report(&redis);
    r.require(
        r.sections >= 8,
        "too few critical sections to mean anything",
    );
    r.require(share(&r, 0) >= 0.5, "most rounds should simply succeed");
    r.assert();
}

#[test]
fn faults_lockrun_sigkilled() {
    // lockrun dies at random moments (mostly while its job runs): the job gets its
    // parent-death SIGTERM, the key expires by its TTL, and only then does a waiter get in.
    let redis = Server::start();
    let ch = Chaos::new("faults_lockrun_sigkilled", &redis);
    let key = ch.key("killed", Mode::Exclusive, ms(500));
    let until = Instant::now() + ch.scaled_duration(SOAK);
    let mut killed = Vec::new();
    thread::scope(|s| {
        s.spawn(|| {
            ch.contenders(&redis, 6, until, &[0, 75], |_, rng| {
                soak_round(rng, &key, &[500], 0.25, &[])
            })
        });
        let mut rng = ch.rng();
        thread::sleep(ms(rng.range(100, 400)));
        while Instant::now() < until {
            let victims = if rng.chance(0.75) {
                ch.holders()
            } else {
                ch.live()
            };
            // No victim at this moment (nobody holding, on a slow machine for a while): look
            // again soon instead of skipping a whole interval. A CI run that skipped most of
            // them killed twice in 4 s, too few to mean anything.
            let Some(&pid) = rng.pick(&victims) else {
                thread::sleep(ms(10));
                continue;
            };
            if ch.signal(pid, libc::SIGKILL) {
                ch.fault(&format!("SIGKILL lockrun {pid}"));
                killed.push((pid, Instant::now()));
            }
            thread::sleep(ms(rng.range(100, 400)));
        }
    });
    // The parent-death signal, not the end of its hold, must have stopped each killed
    // holder's job (bash dies of SIGTERM at once; 300 ms is slack for a loaded machine).
    let sections = ch.recorder.sections();
    for (pid, at) in killed {
        let Some(s) = sections.iter().find(|s| ran_by(s, pid)) else {
            continue; // killed while waiting
        };
        if let Some(gone) = s.gone().filter(|_| s.begin < at) {
            if gone.saturating_duration_since(at) > ms(300) && s.end.is_none_or(|e| e > at) {
                ch.problem(format!(
                    "the job of SIGKILLed lockrun {pid} ran on for {:?}",
                    gone.saturating_duration_since(at)
                ));
            }
        }
    }
    let mut r = ch.report(&redis);
    r.require(r.faults >= 3, "too few kills to mean anything");
    r.assert();
}

#[test]
fn faults_lockrun_paused_past_ttl() {
    // A process pause of lockrun (SIGSTOP) past its TTL while the job runs on: a process
    // pause is the case a lease cannot cover, so the overlap is EXPECTED and measured. What
    // must hold: the next holder gets a higher fence, the resource rejects the paused holder's
    // writes once the new holder has written, and on SIGCONT lockrun stops its job (76).
    let redis = Server::start();
    let ch = Chaos::new("faults_lockrun_paused_past_ttl", &redis).allowing_overlap();
    let ttl = 500;
    let key = ch.key("paused", Mode::Exclusive, ms(ttl));
    let t = format!("{ttl}ms");
    let mut rng = ch.rng();
    for _ in 0..ch.scaled(1) {
        let a = ch.spawn(
            ch.command(
                &redis,
                &["-t", &t, &key],
                &Job::hold(5000).writing_every(20),
            ),
            &[76],
        );
        wait_begin(&ch, &a);
        let b = ch.spawn(
            ch.command(&redis, &["--wait", "10s", "-t", &t, &key], &Job::hold(300)),
            &[0],
        );
        thread::sleep(ms(rng.range(0, ttl / 2)));
        ch.signal(a.pid, libc::SIGSTOP);
        ch.fault(&format!("SIGSTOP lockrun {}", a.pid));
        // Keep it stopped until the paused holder's job has had a write rejected (so after
        // the new holder wrote), then let it notice.
        let a_pid = a.pid as i32;
        let rejected = ch.recorder.wait_until(ms(10_000), |s| {
            s.iter().any(|s| s.lockrun == a_pid && s.stale > 0)
        });
        let resumed = Instant::now();
        ch.signal(a.pid, libc::SIGCONT);
        if !rejected {
            ch.problem("the paused holder's job never had a write rejected".into());
        }
        match job_gone(&ch, a.pid, PATIENCE) {
            Some(g) if g.saturating_duration_since(resumed) <= ms(ttl) => {}
            g => ch.problem(format!(
                "after SIGCONT, lockrun {} left its job running for {:?} (more than the TTL)",
                a.pid,
                g.map(|g| g.saturating_duration_since(resumed))
            )),
        }
        ch.finish(b);
        ch.finish(a);
    }
    let mut r = ch.report(&redis);
    r.require(
        r.stale > 0,
        "fencing rejected none of the paused holder's writes",
    );
    r.require(r.overlaps > 0, "the pause should have produced an overlap");
    r.assert();
}

/// A stall of lockrun (SIGSTOP for 0.3, 0.5 or 0.8 of its TTL, at a random moment while the job
/// runs) with a waiter queued behind it. The rule: lockrun, woken past its
/// SIGTERM moment with the lease not over, renews first and stops the job only if that renewal
/// is not confirmed in time; SIGKILL still comes before the lease can end. A stall of 0.3 or 0.5
/// TTL always leaves the lease intact (a renewal is sent every TTL/3, so the lease has at least
/// 2/3 TTL left when the stall starts): the job must finish (0) and the waiter must not overlap
/// it. A stall of 0.8 TTL may outlast the lease: then the job is stopped (76), and only then may
/// the waiter's job overlap it (a stall is the one case a lease cannot cover), fenced.
#[test]
fn faults_lockrun_stalled_for_part_of_its_ttl() {
    let redis = Server::start();
    let ch = Chaos::new("faults_lockrun_stalled_for_part_of_its_ttl", &redis).allowing_overlap();
    let ttl = 1500;
    let t = format!("{ttl}ms");
    let mut rng = ch.rng();
    let mut survived = std::collections::BTreeMap::<u64, (u32, u32)>::new();
    for round in 0..ch.scaled(6) {
        let tenths = [3, 5, 8][round as usize % 3];
        let key = ch.key(&format!("stalled{round}"), Mode::Exclusive, ms(ttl));
        let a = ch.spawn(
            ch.command(
                &redis,
                &["-t", &t, &key],
                &Job::hold(2 * ttl).writing_every(20),
            ),
            &[0, 76],
        );
        wait_begin(&ch, &a);
        let b = ch.spawn(
            ch.command(&redis, &["--wait", "20s", "-t", &t, &key], &Job::hold(100)),
            &[0],
        );
        thread::sleep(ms(rng.range(0, ttl / 2)));
        let stall = ms(ttl * tenths / 10);
        ch.signal(a.pid, libc::SIGSTOP);
        ch.fault(&format!(
            "SIGSTOP lockrun {} for {stall:?} (0.{tenths} TTL)",
            a.pid
        ));
        thread::sleep(stall);
        ch.signal(a.pid, libc::SIGCONT);
        let (a_pid, b_pid) = (a.pid, b.pid);
        let code = ch.finish(a);
        ch.finish(b);
        let entry = survived.entry(tenths).or_default();
        entry.1 += 1;
        if code == 0 {
            entry.0 += 1;
        }
        if tenths < 8 && code != 0 {
            ch.problem(format!(
                "a stall of 0.{tenths} TTL left the lease intact, yet lockrun {a_pid} exited {code}"
            ));
        }
        // Where the job finished, the waiter's job began only after it.
        let sections = ch.recorder.sections();
        let of = |pid: u32| sections.iter().find(|s| ran_by(s, pid)).cloned();
        if let (0, Some(sa), Some(sb)) = (code, of(a_pid), of(b_pid)) {
            if sa.gone().is_none_or(|g| sb.begin < g) {
                ch.problem(format!(
                    "lockrun {a_pid} kept its lease through a 0.{tenths} TTL stall, but the waiter's job began while its job ran"
                ));
            }
        }
    }
    for (tenths, (kept, runs)) in &survived {
        // Said, not counted as a fault of the scenario's table.
        eprintln!(
            "{}: stalls of 0.{tenths} TTL: the job finished in {kept} of {runs}",
            ch.name
        );
    }
    ch.report(&redis).assert();
}

/// Starts `lockrun -v -t <ttl>ms KEY` with a job that holds for `hold_ms`, writing every 50 ms,
/// waits for the job to begin, then fills lockrun's stderr pipe, which nobody reads.
fn spawn_plugged(
    ch: &Chaos,
    redis: &Server,
    key: &str,
    ttl: u64,
    hold_ms: u64,
    expected: &[i32],
) -> Running {
    let t = format!("{ttl}ms");
    let job = Job::hold(hold_ms).writing_every(50).quiet();
    let a = ch.spawn_undrained(ch.command(redis, &["-v", "-t", &t, key], &job), expected);
    wait_begin(ch, &a);
    let bytes = a.plug_stderr();
    ch.fault(&format!(
        "stderr pipe of lockrun {} full ({bytes} bytes)",
        a.pid
    ));
    a
}

#[test]
fn faults_undrained_stderr_client_kill() {
    // lockrun -v logs every renewal into a stderr pipe that nobody reads and that is full;
    // meanwhile its connection is killed. Logging must never stall renewal: the lease holds,
    // the waiter gets the lock only after the job ended.
    let redis = Server::start();
    let ch = Chaos::new("faults_undrained_stderr_client_kill", &redis);
    // 1.5 s: at 600 ms, on a slow day here, a renewal between two kills can miss its ~170 ms
    // window for reasons that have nothing to do with logging.
    let ttl = 1500;
    let key = ch.key("plugged", Mode::Exclusive, ms(ttl));
    let t = format!("{ttl}ms");
    let mut rng = ch.rng();
    for _ in 0..ch.scaled(1) {
        let mut a = spawn_plugged(&ch, &redis, &key, ttl, 2000, &[0]);
        let b = ch.spawn(
            ch.command(&redis, &["--wait", "10s", "-t", &t, &key], &Job::hold(100)),
            &[0],
        );
        for _ in 0..3 {
            thread::sleep(ms(rng.range(150, 450)));
            redis.try_cmd::<i64>(&["CLIENT", "KILL", "TYPE", "normal"]);
            ch.fault("CLIENT KILL TYPE normal");
        }
        ch.finish(b);
        a.drain_stderr();
        ch.finish(a);
    }
    ch.report(&redis).assert();
}

#[test]
fn faults_undrained_stderr_key_deleted() {
    // The key is deleted by hand while lockrun's stderr is a full pipe nobody reads: lockrun
    // must still notice and stop its job within the TTL (before the lease it believed in could
    // have expired), whatever its logging does.
    let redis = Server::start();
    let ch = Chaos::new("faults_undrained_stderr_key_deleted", &redis);
    let ttl = 600;
    let key = ch.key("plugged-del", Mode::Exclusive, ms(ttl));
    let mut rng = ch.rng();
    for _ in 0..ch.scaled(1) {
        let mut a = spawn_plugged(&ch, &redis, &key, ttl, 4000, &[76]);
        thread::sleep(ms(rng.range(0, ttl / 3)));
        redis.cmd::<i64>(&["DEL", &key]);
        let deleted = Instant::now();
        ch.lease_ended(&key);
        ch.fault(&format!("DEL {key}"));
        match job_gone(&ch, a.pid, ms(10_000)) {
            Some(g) if g.saturating_duration_since(deleted) <= ms(ttl) => {}
            g => ch.problem(format!(
                "the job ran on {:?} after its key was deleted (TTL {ttl} ms)",
                g.map(|g| g.saturating_duration_since(deleted))
            )),
        }
        a.drain_stderr();
        ch.finish(a);
    }
    ch.report(&redis).assert();
}

#[test]
fn faults_slow_exit_on_lock_loss() {
    // Renewals fail (redis-server SIGSTOPped) under a job that takes 300 ms to exit on SIGTERM
    // and keeps writing meanwhile, or one that ignores SIGTERM. The job must be gone before the
    // lease can have expired, so the next holder, who gets in as soon as the server is back,
    // never overlaps it. --kill-after is long: the TTL, not it, must bound the job's end.
    let redis = Server::start();
    let ch = Chaos::new("faults_slow_exit_on_lock_loss", &redis);
    let ttl = 600;
    let key = ch.key("slow", Mode::Exclusive, ms(ttl));
    let t = format!("{ttl}ms");
    let mut rng = ch.rng();
    for round in 0..ch.scaled(2) {
        let on_term = if round % 2 == 0 {
            OnTerm::Slow(300)
        } else {
            OnTerm::Ignore
        };
        let job = Job::hold(5000).writing_every(25).on_term(on_term);
        let a = ch.spawn(
            ch.command(&redis, &["-t", &t, "--kill-after", "5s", &key], &job),
            &[76],
        );
        wait_begin(&ch, &a);
        thread::sleep(ms(rng.range(0, ttl / 3)));
        redis.pause();
        ch.fault(&format!(
            "SIGSTOP redis-server under a job with {on_term:?}"
        ));
        // The server processed the last renewal before the pause: after one TTL the lease has
        // certainly ended by the server's clock, so the next holder may get in.
        thread::sleep(ms(ttl + 20));
        redis.resume();
        let b = ch.spawn(
            ch.command(&redis, &["--wait", "10s", "-t", &t, &key], &Job::hold(200)),
            &[0],
        );
        ch.finish(b);
        ch.finish(a);
    }
    ch.report(&redis).assert();
}

#[test]
fn faults_redis_paused() {
    // redis-server SIGSTOPped for longer than the TTL, then continued: the holder must have
    // stopped its job by then; a waiter queued before the pause and one arriving after both
    // get the lock, one at a time.
    let redis = Server::start();
    let ch = Chaos::new("faults_redis_paused", &redis);
    let ttl = 500;
    let key = ch.key("frozen", Mode::Exclusive, ms(ttl));
    let t = format!("{ttl}ms");
    let mut rng = ch.rng();
    for _ in 0..ch.scaled(2) {
        let a = ch.spawn(
            ch.command(
                &redis,
                &["-t", &t, &key],
                &Job::hold(5000).writing_every(50),
            ),
            &[76],
        );
        wait_begin(&ch, &a);
        let queued = ch.spawn(
            ch.command(&redis, &["--wait", "10s", "-t", &t, &key], &Job::hold(100)),
            &[0],
        );
        if queued.log.wait_for("waiting", 0, PATIENCE).is_none() {
            ch.problem(format!("the waiter never queued: {}", queued.log.text()));
        }
        thread::sleep(ms(rng.range(0, ttl / 3)));
        redis.pause();
        ch.fault("SIGSTOP redis-server");
        thread::sleep(ms(rng.range(ttl + 20, 2 * ttl)));
        redis.resume();
        let late = ch.spawn(
            ch.command(&redis, &["--wait", "10s", "-t", &t, &key], &Job::hold(100)),
            &[0],
        );
        ch.finish(late);
        ch.finish(queued);
        ch.finish(a);
    }
    ch.report(&redis).assert();
}

#[test]
fn faults_redis_debug_sleep() {
    // DEBUG SLEEP past the TTL: the server is alive (connections are accepted, requests queue)
    // but answers nothing. Renewals sent during the sleep run when it ends; by then the lease
    // is over, so they must not revive it, and the holder must have stopped its job.
    let mut redis = Server::start();
    redis.respawn(&["--enable-debug-command", "local"]);
    let ch = Chaos::new("faults_redis_debug_sleep", &redis);
    let ttl = 500;
    let key = ch.key("asleep", Mode::Exclusive, ms(ttl));
    let t = format!("{ttl}ms");
    let mut rng = ch.rng();
    for _ in 0..ch.scaled(1) {
        let a = ch.spawn(
            ch.command(
                &redis,
                &["-t", &t, &key],
                &Job::hold(5000).writing_every(50),
            ),
            &[76],
        );
        wait_begin(&ch, &a);
        thread::sleep(ms(rng.range(0, ttl / 3)));
        let secs = format!("{:.3}", rng.range(ttl + 50, 2 * ttl) as f64 / 1000.0);
        ch.fault(&format!("DEBUG SLEEP {secs}"));
        if redis.try_cmd::<()>(&["DEBUG", "SLEEP", &secs]).is_none() {
            ch.problem("DEBUG SLEEP failed (is the debug command enabled?)".into());
        }
        let b = ch.spawn(
            ch.command(&redis, &["--wait", "10s", "-t", &t, &key], &Job::hold(200)),
            &[0],
        );
        ch.finish(b);
        ch.finish(a);
    }
    ch.report(&redis).assert();
}

#[test]
fn faults_redis_restarted_empty() {
    // redis-server crashes and comes back empty (no persistence) while holders run. The old
    // holders overlap the new ones until their next renewal finds the key gone: EXPECTED, and
    // measured. What must hold: every fence handed out after the restart exceeds every fence
    // before it, so the resource rejects the old holder's writes, never the new holder's.
    let mut redis = Server::start();
    let ch = Chaos::new("faults_redis_restarted_empty", &redis).allowing_overlap();
    let ttl = 3000;
    let t = format!("{ttl}ms");
    let key = ch.key("reborn", Mode::Exclusive, ms(ttl));
    let pool = ch.key("reborn-pool", Mode::Limit(2), ms(ttl));
    // Advance the fencing counters first, so a counter that restarts from zero shows.
    for args in [
        &[key.as_str()][..],
        &[key.as_str()],
        &["--limit", "2", &pool],
    ] {
        let lr = ch.spawn(ch.command(&redis, args, &Job::hold(0)), &[0]);
        ch.finish(lr);
    }
    for _ in 0..ch.scaled(1) {
        let old = ch.spawn(
            ch.command(
                &redis,
                &["-v", "-t", &t, &key],
                &Job::hold(8000).writing_every(20),
            ),
            &[76],
        );
        let old_sem = ch.spawn(
            ch.command(
                &redis,
                &["-t", &t, "--limit", "2", &pool],
                &Job::hold(8000).writing_every(50),
            ),
            &[76],
        );
        wait_begin(&ch, &old);
        wait_begin(&ch, &old_sem);
        // Right after a renewal: the old holder then learns of the loss only at its next one,
        // TTL/3 later, so its job surely writes after the new holder's first write.
        let from = old.log.len();
        assert!(
            old.log.wait_for("renewed", from, PATIENCE).is_some(),
            "no renewal logged: {}",
            old.log.text()
        );
        ch.restart_redis(&mut redis, &[]);
        ch.fault("redis-server killed and restarted empty");
        let new = ch.spawn(
            ch.command(
                &redis,
                &["--wait", "10s", "-t", &t, &key],
                &Job::hold(300).writing_every(50),
            ),
            &[0],
        );
        let new_sem = ch.spawn(
            ch.command(
                &redis,
                &["--wait", "10s", "-t", &t, "--limit", "2", &pool],
                &Job::hold(300),
            ),
            &[0],
        );
        let (old_pid, new_pid) = (old.pid as i32, new.pid as i32);
        ch.finish(new);
        ch.finish(new_sem);
        ch.finish(old);
        ch.finish(old_sem);
        let sections = ch.recorder.sections();
        let of = |pid| sections.iter().find(|s| s.lockrun == pid);
        if let (Some(o), Some(n)) = (of(old_pid), of(new_pid)) {
            if n.stale > 0 {
                ch.problem(format!(
                    "the new holder's writes were rejected ({} stale, fence {} vs the old holder's {})",
                    n.stale, n.fence, o.fence
                ));
            }
            if o.stale == 0 {
                ch.problem(
                    "none of the old holder's writes after the restart were rejected".into(),
                );
            }
        }
    }
    let mut r = ch.report(&redis);
    r.require(
        r.overlaps > 0,
        "the restart should have produced an overlap",
    );
    r.assert();
}

#[test]
fn faults_client_kill_soak() {
    // A soak while lockrun's connections are killed over and over (CLIENT KILL of normal and of
    // pub/sub connections) and the script cache is flushed: no overlap, no lost lock, and no
    // connection leak: the server's client count stays bounded and drops back at the end.
    let redis = Server::start();
    let ch = Chaos::new("faults_client_kill_soak", &redis);
    let key = ch.key("kills", Mode::Exclusive, ms(1000));
    let contenders = 8;
    // Each lockrun has at most two connections (requests, wake-ups), plus the watcher and the
    // test's own short-lived ones.
    let bound = 2 * contenders as u64 + 4;
    let until = Instant::now() + ch.scaled_duration(SOAK);
    thread::scope(|s| {
        s.spawn(|| {
            // Never 69: a killed connection is retried (once on a new connection; while
            // waiting, until the wait ends), so no run fails for it.
            ch.contenders(&redis, contenders, until, &[0, 75], |_, rng| {
                soak_round(rng, &key, &[1000], 0.1, &[])
            })
        });
        let mut rng = ch.rng();
        while Instant::now() < until {
            thread::sleep(ms(rng.range(100, 300)));
            let roll = rng.range(0, 100);
            if roll < 60 {
                redis.try_cmd::<i64>(&["CLIENT", "KILL", "TYPE", "normal"]);
                ch.fault("CLIENT KILL TYPE normal");
            } else if roll < 85 {
                let list: String = redis
                    .try_cmd(&["CLIENT", "LIST", "TYPE", "pubsub"])
                    .unwrap_or_default();
                let ids: Vec<&str> = list
                    .lines()
                    .filter(|l| !l.contains(&format!("name={}", chaos::watcher_name())))
                    .filter_map(|l| l.strip_prefix("id=")?.split(' ').next())
                    .collect();
                if let Some(id) = rng.pick(&ids) {
                    redis.try_cmd::<i64>(&["CLIENT", "KILL", "ID", id]);
                    ch.fault(&format!("CLIENT KILL ID {id} (pub/sub)"));
                }
            } else {
                redis.try_cmd::<()>(&["SCRIPT", "FLUSH"]);
                ch.fault("SCRIPT FLUSH");
            }
            if let Some(n) = redis.connected_clients() {
                if n > bound {
                    ch.problem(format!("{n} clients connected (bound {bound})"));
                }
            }
        }
    });
    // With every lockrun gone, only the watcher and this query remain.
    let mut last = None;
    let settled = (0..200).any(|_| {
        last = redis.connected_clients();
        last.is_some_and(|n| n <= 2) || {
            thread::sleep(ms(10));
            false
        }
    });
    if !settled {
        ch.problem(format!("{last:?} clients still connected after the soak"));
    }
    let mut r = ch.report(&redis);
    r.require(r.faults >= 5, "too few faults to mean anything");
    r.assert();
}

#[test]
fn faults_checker_self_test() {
    // The checks must be able to fire: jobs run here without any lock (bash with a made-up
    // LOCKRUN_KEY/LOCKRUN_FENCE), breaking each rule once, and the report must say so.
    let redis = Server::start();
    let ch = Chaos::new("faults_checker_self_test", &redis);
    ch.key("k", Mode::Exclusive, ms(100));
    ch.key("sem", Mode::Limit(2), ms(100));
    ch.key("left", Mode::Exclusive, ms(100));
    let unlocked = |key: &str, fence: u64, job: Job| {
        let [bash, c, script] = ch.job(&job);
        let mut cmd = Command::new(bash);
        cmd.args([c, script])
            .env("LOCKRUN_KEY", key)
            .env("LOCKRUN_FENCE", fence.to_string());
        cmd
    };
    // Two "holders" of k at once, the later with a lower fence: an overlap, a fence going
    // backwards, and the later one's writes rejected as stale.
    let a = ch.spawn(unlocked("k", 5, Job::hold(400).writing_every(20)), &[0]);
    wait_begin(&ch, &a);
    let b = ch.spawn(unlocked("k", 3, Job::hold(100).writing_every(20)), &[0]);
    ch.finish(b);
    ch.finish(a);
    // A job killed before `end` is live until its process is gone, and not a moment longer:
    // one that begins while it runs overlaps it, one that begins after its death does not.
    let c = ch.spawn(unlocked("k", 7, Job::hold(5000)), &[0]);
    wait_begin(&ch, &c);
    let d = ch.spawn(unlocked("k", 8, Job::hold(50)), &[0]);
    ch.finish(d);
    ch.signal(c.pid, libc::SIGKILL);
    assert!(job_gone(&ch, c.pid, PATIENCE).is_some(), "death not seen");
    let e = ch.spawn(unlocked("k", 9, Job::hold(50)), &[0]);
    ch.finish(e);
    ch.finish(c);
    // Three holders of a semaphore of 2, two with the same fence.
    let sem: Vec<_> = [1, 2, 2]
        .iter()
        .map(|&f| ch.spawn(unlocked("sem", f, Job::hold(300)), &[0]))
        .collect();
    for lr in sem {
        ch.finish(lr);
    }
    // An unexpected exit code, a panic, and a key without a TTL.
    let mut exit3 = Command::new("bash");
    exit3.args(["-c", "exit 3"]);
    ch.finish(ch.spawn(exit3, &[0]));
    let mut panics = Command::new("bash");
    panics.args([
        "-c",
        "echo \"thread 'main' panicked at src/x.rs\" >&2; exit 101",
    ]);
    ch.finish(ch.spawn(panics, &[0, 101]));
    redis.cmd::<()>(&["SET", "left", "forever"]);

    let r = ch.report(&redis);
    let found = |needle: &str| r.violations.iter().filter(|v| v.contains(needle)).count();
    assert_eq!(found("overlap on k"), 2, "{:#?}", r.violations);
    assert_eq!(
        found("fence did not increase on k"),
        1,
        "{:#?}",
        r.violations
    );
    assert_eq!(found("stale writes rejected"), 1, "{:#?}", r.violations);
    assert!(r.stale > 0);
    assert_eq!(
        found("live holders of sem (limit 2)"),
        1,
        "{:#?}",
        r.violations
    );
    assert_eq!(
        found("fence 2 handed out twice on sem"),
        1,
        "{:#?}",
        r.violations
    );
    assert_eq!(
        found("exited 3, expected one of [0]"),
        1,
        "{:#?}",
        r.violations
    );
    assert_eq!(found("panicked"), 1, "{:#?}", r.violations);
    assert_eq!(found("key left still exists"), 1, "{:#?}", r.violations);
    assert_eq!(r.violations.len(), 9, "nothing else: {:#?}", r.violations);
    assert_eq!(r.overlaps, 3, "k twice, sem once");
}
