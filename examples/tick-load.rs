//! A load generator for one tick of `--every` on a fleet larger than one machine can run as
//! processes: N simulated hosts in one process, each a task with a lock client of its own (its
//! own connection), speaking lockrun's own scripts through the crate's `LockService`, as the
//! binary's hosts would:
//!
//!     cargo run --release --example tick-load -- redis://127.0.0.1:6379 HOSTS [--standby]
//!         [--fire-over 1s] [--job 6s] [--ttl 3s] [--every 20s] [--kill-winner-at 2s]
//!
//! Each host fires at a random moment within `--fire-over` (as cron daemons do) and runs what
//! one `lockrun -q -E 0 --every … [--standby] KEY -- job` runs: the acquire; for the host that
//! takes the tick, a job of `--job` with a renewal every TTL/3 and a release; with `--standby`,
//! for the hosts the tick needs, the SUBSCRIBE and a look whenever the holder's lease would end
//! (the binary's waiting loop, `app/turn.rs`, followed here in brief: its cost is what is
//! measured, and `tests/bench` checks the two against each other where both can run).
//! `--kill-winner-at` ends the winner then without a release, as a host that dies.
//!
//! Prints one JSON line: the requests the fleet sent, counted at the server (`INFO
//! commandstats`: EVALSHA, EVAL, SUBSCRIBE, SSUBSCRIBE), the server's CPU seconds, the most
//! connections the server held after the last host fired, the runs that took the tick, and
//! how long the tick took.

use lockrun::lock::redis::{ConnectOptions, RedisLock};
use lockrun::lock::{
    Acquire, Holder, LockKind, LockService, LockSpec, Note, Outcome, DEFAULT_STANDBYS,
};
use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;
use tokio::time::Instant;

struct Options {
    url: String,
    hosts: u32,
    standby: bool,
    fire_over: Duration,
    job: Duration,
    ttl: Duration,
    every: Duration,
    kill_winner_at: Option<Duration>,
}

fn parse() -> Result<Options, String> {
    let mut args = std::env::args().skip(1);
    let url = args.next().ok_or("usage: tick-load URL HOSTS [options]")?;
    let hosts = args
        .next()
        .and_then(|n| n.parse().ok())
        .ok_or("HOSTS: a number")?;
    let mut o = Options {
        url,
        hosts,
        standby: false,
        fire_over: Duration::from_secs(1),
        job: Duration::from_secs(6),
        ttl: Duration::from_secs(3),
        every: Duration::from_secs(20),
        kill_winner_at: None,
    };
    while let Some(flag) = args.next() {
        if flag == "--standby" {
            o.standby = true;
            continue;
        }
        let value = args.next().ok_or(format!("{flag}: a value"))?;
        let d = lockrun::duration::parse(&value).map_err(|e| format!("{flag}: {e}"))?;
        match flag.as_str() {
            "--fire-over" => o.fire_over = d,
            "--job" => o.job = d,
            "--ttl" => o.ttl = d,
            "--every" => o.every = d,
            "--kill-winner-at" => o.kill_winner_at = Some(d),
            _ => return Err(format!("unknown option {flag}")),
        }
    }
    Ok(o)
}

/// What the fleet saw, shared by its tasks (one thread).
#[derive(Default)]
struct Fleet {
    took: Cell<u32>,
    completed: Cell<u32>,
    standing_by: Cell<u32>,
}

/// One host's run of the tick.
async fn host(o: Rc<Options>, fleet: Rc<Fleet>, delay: Duration) {
    tokio::time::sleep(delay).await;
    let hold = o.every - (o.every / 10).max(Duration::from_secs(1));
    let kind = if o.standby {
        LockKind::Tick {
            length: hold,
            standbys: DEFAULT_STANDBYS,
        }
    } else {
        LockKind::Exclusive
    };
    let spec = LockSpec {
        kind,
        history: 100,
        every: Some(o.every),
        ..LockSpec::new("tick-load", o.ttl)
    };
    let Ok(mut lock) = RedisLock::new(&o.url, &ConnectOptions::default(), Duration::from_secs(5))
    else {
        return;
    };
    let holder = Holder::new(std::ffi::OsStr::new("job"));
    let started = Instant::now();
    let mut subscribed = false;
    loop {
        let Ok(answer) = lock.acquire(&spec, &holder, o.standby).await else {
            return;
        };
        match answer {
            Acquire::Acquired(lease) => {
                let first = fleet.took.get() == 0;
                fleet.took.set(fleet.took.get() + 1);
                let dies = first.then_some(o.kill_winner_at).flatten();
                let end = Instant::now() + dies.unwrap_or(o.job);
                let mut next = Instant::now() + o.ttl / 3;
                while next < end {
                    tokio::time::sleep_until(next).await;
                    let _ = lock.renew(&spec, &lease).await;
                    next += o.ttl / 3;
                }
                tokio::time::sleep_until(end).await;
                if dies.is_some() {
                    // A host that dies sends nothing more: its connection closes with it.
                    return;
                }
                let note = Note {
                    outcome: Outcome::Ran,
                    exit_code: Some(0),
                    duration: started.elapsed(),
                    completes_tick: true,
                    reopened: false,
                };
                let keep = hold.saturating_sub(lease.confirmed_at.elapsed());
                let keep = if o.standby { Duration::ZERO } else { keep };
                let _ = lock.release(&spec, &lease, keep, Some(&note)).await;
                fleet.completed.set(fleet.completed.get() + 1);
                return;
            }
            Acquire::Passed { .. } | Acquire::TickEnded { .. } if !subscribed => return,
            Acquire::Held { .. } if !o.standby => return,
            Acquire::Passed { .. } | Acquire::TickEnded { .. } => {
                let note = Note {
                    outcome: Outcome::Skipped,
                    exit_code: None,
                    duration: started.elapsed(),
                    completes_tick: false,
                    reopened: false,
                };
                let _ = lock.leave_queue(&spec, &holder, Some(&note)).await;
                fleet.standing_by.set(fleet.standing_by.get() - 1);
                return;
            }
            Acquire::Held { pttl, .. } => {
                if !subscribed {
                    subscribed = true;
                    fleet.standing_by.set(fleet.standing_by.get() + 1);
                    let _ = lock.subscribe_wakeups(&spec).await;
                    continue;
                }
                let look = pttl.map_or(Duration::from_secs(1), |p| {
                    (p + Duration::from_millis(5) + p / 100).min(o.ttl + Duration::from_secs(1))
                });
                lock.wait_for_turn(&holder, look).await;
            }
        }
    }
}

/// The text of `INFO section` (empty when the server does not answer).
fn info(con: &mut redis::Connection, section: &str) -> String {
    redis::cmd("INFO")
        .arg(section)
        .query(con)
        .unwrap_or_default()
}

fn requests(con: &mut redis::Connection) -> u64 {
    let stats = info(con, "commandstats");
    ["evalsha", "eval", "subscribe", "ssubscribe"]
        .iter()
        .map(|c| {
            stats
                .lines()
                .find_map(|l| l.strip_prefix(&format!("cmdstat_{c}:calls=")))
                .and_then(|rest| rest.split(',').next()?.parse::<u64>().ok())
                .unwrap_or(0)
        })
        .sum()
}

fn field(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

fn cpu(con: &mut redis::Connection) -> f64 {
    let text = info(con, "cpu");
    field(&text, "used_cpu_sys") + field(&text, "used_cpu_user")
}

fn main() {
    let o = match parse() {
        Ok(o) => Rc::new(o),
        Err(e) => {
            eprintln!("tick-load: {e}");
            std::process::exit(64);
        }
    };
    let mut probe = redis::Client::open(o.url.as_str())
        .and_then(|c| c.get_connection())
        .unwrap_or_else(|e| {
            eprintln!("tick-load: {e}");
            std::process::exit(69)
        });
    let before = (requests(&mut probe), cpu(&mut probe));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let fleet = Rc::new(Fleet::default());
    let started = std::time::Instant::now();
    let local = tokio::task::LocalSet::new();
    let (peak_tx, peak_rx) = std::sync::mpsc::channel();
    let sampler = {
        let url = o.url.clone();
        let from = o.fire_over + Duration::from_secs(1);
        let until = o.fire_over + o.job;
        std::thread::spawn(move || {
            let mut con = redis::Client::open(url.as_str()).and_then(|c| c.get_connection());
            let mut peak = 0.0f64;
            std::thread::sleep(from);
            while started.elapsed() < until {
                if let Ok(con) = con.as_mut() {
                    // The sampler's own connection is not the fleet's.
                    peak = peak.max(field(&info(con, "clients"), "connected_clients") - 2.0);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = peak_tx.send(peak);
        })
    };
    local.block_on(&rt, async {
        let mut tasks = Vec::new();
        for i in 0..o.hosts {
            let delay = o
                .fire_over
                .mul_f64(f64::from(i) / f64::from(o.hosts.max(1)));
            tasks.push(tokio::task::spawn_local(host(
                o.clone(),
                fleet.clone(),
                delay,
            )));
        }
        for t in tasks {
            let _ = t.await;
        }
    });
    let _ = sampler.join();
    let peak = peak_rx.recv().unwrap_or(0.0);
    // Less the probe's own INFO requests: none of the counted commands.
    let after = (requests(&mut probe), cpu(&mut probe));
    println!(
        "{{\"hosts\":{},\"standby\":{},\"requests\":{},\"server_cpu_s\":{:.3},\"peak_connections\":{},\"took\":{},\"completed\":{},\"seconds\":{:.1}}}",
        o.hosts,
        o.standby,
        after.0 - before.0,
        after.1 - before.1,
        peak,
        fleet.took.get(),
        fleet.completed.get(),
        started.elapsed().as_secs_f64()
    );
}
