//! Ticks of a `--every --standby` job under server faults (tests/cases/tick_faults.rs). Three
//! hosts fire each tick, each `lockrun -q --every P --ttl T --standby KEY`, whose job logs its
//! start and how it ended (by itself, or stopped by SIGTERM) with the wall clock in ms to one
//! file; [`Ticks::measure`] reads that log back into what a fault cost: ticks lost, ticks run to
//! their end twice, ticks run again after a stopped run, two jobs live at once, and how long
//! after the fault the tick was taken over. [`Rows`] sums the runs of one fault, checks the
//! promise docs/guide.md makes for it, prints the row and appends it to `LOCKRUN_TICKS_REPORT`
//! (docs/availability.md's "Ticks under server faults" is that file; `tests/ha-table.sh --ticks`
//! regenerates it).

use super::chaos::append_row;
use super::lockrun::{Background, Lockrun};
use super::{ms, PATIENCE};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The client hosts, in the order they fire (the first one takes the tick).
pub const HOSTS: [&str; 3] = ["h1", "h2", "h3"];

/// The waiter queue of the hosts' key (`tick`): the standbys stand by in it.
pub const QUEUE: &str = "lockrun:waiters:{tick}";

/// The tick record of the hosts' key: `open …` or `done …` (src/lock/scripts/lib/tick.lua).
pub const RECORD: &str = "lockrun:tick:{tick}";

/// The wall clock in ms: what the jobs log with `date +%s%3N`.
pub fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// How a row's hosts run the job.
#[derive(Clone, Debug)]
pub struct Shape {
    /// `--every` (ms); the hosts fire the second tick this long after the first.
    pub every: u64,
    /// `--ttl` (ms): a standby takes over at most this long after the holder is gone.
    pub ttl: u64,
    /// How long the job runs (ms).
    pub job: u64,
    /// More lockrun options (`--acks 1`).
    pub args: Vec<String>,
}

/// Two ticks of one row: the hosts, the log their jobs write, the faults injected.
pub struct Ticks {
    shape: Shape,
    dir: tempfile::TempDir,
    log: PathBuf,
    /// When tick 1 was fired (wall ms).
    fired: Mutex<Option<(Instant, u64)>>,
    faults: Mutex<Vec<(u64, String)>>,
}

/// One host's lockrun of one tick.
pub struct Fired {
    pub host: String,
    pub tick: usize,
    pub run: Background,
}

impl Ticks {
    pub fn new(shape: Shape) -> Ticks {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("jobs.log");
        Ticks {
            shape,
            dir,
            log,
            fired: Mutex::default(),
            faults: Mutex::default(),
        }
    }

    /// Fires tick `n` (1 or 2) on every host, the first one 100 ms ahead of the others:
    /// `lockrun(host)` is the lockrun of that host (its servers), the options and job are
    /// added here. Tick 2 is fired `every` after tick 1 (this sleeps until then).
    pub fn fire(&self, n: usize, lockrun: impl Fn(&str) -> Lockrun) -> Vec<Fired> {
        if n == 1 {
            *self.fired.lock().unwrap() = Some((Instant::now(), wall_ms()));
        } else {
            let (at, _) = self.fired.lock().unwrap().expect("tick 1 fired first");
            thread::sleep(
                (at + ms(self.shape.every * (n as u64 - 1)))
                    .saturating_duration_since(Instant::now()),
            );
        }
        HOSTS
            .iter()
            .enumerate()
            .map(|(i, host)| {
                if i == 1 {
                    thread::sleep(ms(100));
                }
                let mut cmd = lockrun(host);
                let every = format!("{}ms", self.shape.every);
                let ttl = format!("{}ms", self.shape.ttl);
                cmd.args(["-q", "--every", &every, "--ttl", &ttl, "--standby", "tick"])
                    .args(&self.shape.args)
                    .args(["--", "sh", "-c", &self.job(&format!("{host}:{n}"))]);
                Fired {
                    host: host.to_string(),
                    tick: n,
                    run: cmd.background(self.dir.path(), &format!("{host}-{n}")),
                }
            })
            .collect()
    }

    /// The job: logs `<name> start <ms>`, then `<name> end <ms>` after `job` ms, or `<name>
    /// stop <ms>` at once on SIGTERM (the sleep runs in the background so that the trap runs
    /// without waiting for it).
    fn job(&self, name: &str) -> String {
        let log = self.log.display();
        format!(
            "echo \"{name} start $(date +%s%3N)\" >> '{log}'; \
             trap 'echo \"{name} stop $(date +%s%3N)\" >> '\"'\"'{log}'\"'\"'; exit 143' TERM; \
             sleep {secs} & wait $!; echo \"{name} end $(date +%s%3N)\" >> '{log}'",
            secs = self.shape.job as f64 / 1000.0
        )
    }

    /// Waits until `n` job starts are logged (at most PATIENCE).
    pub fn wait_started(&self, n: usize) {
        self.wait_logged("start", n);
    }

    /// Waits until `n` jobs have logged `what` (`start`, `end`, `stop`; at most PATIENCE).
    pub fn wait_logged(&self, what: &str, n: usize) {
        let start = Instant::now();
        while self.events().iter().filter(|e| e.what == what).count() < n {
            assert!(
                start.elapsed() < PATIENCE,
                "{n} job {what}s not logged in {PATIENCE:?}:\n{}",
                self.text()
            );
            thread::sleep(ms(20));
        }
    }

    /// Notes a fault (the first one while tick 1's job runs is where takeover latency counts
    /// from).
    pub fn fault(&self, what: &str) {
        let at = wall_ms();
        let since = self
            .fired
            .lock()
            .unwrap()
            .map_or(0, |(_, fired)| at.saturating_sub(fired));
        eprintln!("{since} ms into tick 1: {what}");
        self.faults.lock().unwrap().push((at, what.to_string()));
    }

    fn text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn events(&self) -> Vec<Event> {
        self.text()
            .lines()
            .filter_map(|l| {
                let mut w = l.split_whitespace();
                let (host, tick) = w.next()?.split_once(':')?;
                Some(Event {
                    host: host.to_string(),
                    tick: tick.parse().ok()?,
                    what: w.next()?.to_string(),
                    at: w.next()?.parse().ok()?,
                })
            })
            .collect()
    }

    /// Waits for every lockrun, then reads the log: what the faults cost.
    pub fn measure(&self, fired: Vec<Fired>) -> Measure {
        let mut codes = BTreeMap::new();
        let mut said = String::new();
        let mut ended = Vec::new();
        for f in fired {
            let (code, _, err) = f.run.finish();
            *codes.entry(code.unwrap_or(-1)).or_insert(0) += 1;
            if !err.is_empty() {
                said.push_str(&format!("{}:{} (exit {code:?}): {err}", f.host, f.tick));
            }
            ended.push((f.tick, code, err));
        }
        let events = self.events();
        let faults = self.faults.lock().unwrap().clone();
        let mut faults_text = String::new();
        for (at, what) in &faults {
            faults_text.push_str(&format!("{at} fault: {what}\n"));
        }
        let explain = format!(
            "job log:\n{}{faults_text}lockruns' stderr:\n{said}",
            self.text()
        );
        // One run per host and tick: its start, and its end or stop.
        let mut runs: Vec<Run> = Vec::new();
        for e in events.iter().filter(|e| e.what == "start") {
            let over = events
                .iter()
                .find(|o| o.host == e.host && o.tick == e.tick && o.what != "start");
            let over = over.unwrap_or_else(|| {
                panic!(
                    "{}:{}'s job logged neither its end nor its stop (killed?)\n{explain}",
                    e.host, e.tick
                )
            });
            runs.push(Run {
                tick: e.tick,
                start: e.at,
                over: over.at,
                completed: over.what == "end",
            });
        }
        let mut m = Measure {
            codes,
            ended,
            explain,
            ..Measure::default()
        };
        for tick in [1, 2] {
            let of: Vec<&Run> = runs.iter().filter(|r| r.tick == tick).collect();
            let completed = of.iter().filter(|r| r.completed).count();
            if completed == 0 {
                m.lost += 1;
            }
            if completed > 1 {
                m.twice += 1;
            }
            if of.len() > 1 {
                m.rerun += 1;
            }
            if tick == 2 {
                m.starts_in_tick_2 = of.len();
            }
        }
        for (i, a) in runs.iter().enumerate() {
            for b in &runs[i + 1..] {
                let both = a.over.min(b.over) as i64 - a.start.max(b.start) as i64;
                if both > 0 {
                    m.overlaps.push(both as u64);
                }
            }
        }
        // From the first fault while tick 1's first job ran to the next start in that tick.
        let mut tick1: Vec<&Run> = runs.iter().filter(|r| r.tick == 1).collect();
        tick1.sort_by_key(|r| r.start);
        let first = tick1.first().map_or(0, |r| r.start);
        if let Some((fault, _)) = faults.iter().find(|(at, _)| *at >= first) {
            m.takeover = tick1
                .iter()
                .find(|r| r.start > *fault)
                .map(|r| r.start - fault);
        }
        m
    }
}

struct Event {
    host: String,
    tick: usize,
    what: String,
    at: u64,
}

struct Run {
    tick: usize,
    start: u64,
    over: u64,
    completed: bool,
}

/// What the faults of one run (two ticks) cost.
#[derive(Debug, Default)]
pub struct Measure {
    /// Ticks whose job no host ran to its end.
    pub lost: usize,
    /// Ticks whose job ran to its end on two hosts.
    pub twice: usize,
    /// Ticks whose job started again after a run of it was stopped.
    pub rerun: usize,
    /// How many jobs the second tick started (the fault was in the first).
    pub starts_in_tick_2: usize,
    /// How long two jobs were live at once, ms, per overlapping pair.
    pub overlaps: Vec<u64>,
    /// From the fault to the start of the job that took tick 1 over, ms.
    pub takeover: Option<u64>,
    /// The lockruns' exit codes.
    pub codes: BTreeMap<i32, usize>,
    /// Each lockrun's tick, exit code and stderr.
    pub ended: Vec<(usize, Option<i32>, String)>,
    /// The job log, the faults and the lockruns' stderr, for a failure's message.
    pub explain: String,
}

/// What docs/guide.md promises about a tick when this fault strikes.
#[derive(Clone, Copy, Debug)]
pub struct Promise {
    /// Two jobs live at once: none (`None`), or each at most this long.
    pub overlap: Option<Duration>,
    pub again: Again,
}

/// Whether the tick's job may run again in the same tick.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Again {
    /// Never: one run, to its end.
    Never,
    /// After the run that took the tick was stopped; to its end once.
    AfterAStop,
    /// Even after a run that ended by itself: to its end twice.
    Twice,
}

/// The table's columns.
pub const HEADER: &str = "| topology | fault in tick 1 of 2 | promise | runs | ticks lost | ticks run to the end twice | ticks run again after a stopped run | two jobs live at once (worst) | takeover after the fault (worst) | exit codes |\n|---|---|---|---|---|---|---|---|---|---|";

/// The runs of one row.
pub struct Rows {
    topology: String,
    fault: String,
    promise: Promise,
    runs: Vec<Measure>,
}

impl Rows {
    pub fn new(topology: &str, fault: &str, promise: Promise) -> Rows {
        Rows {
            topology: topology.to_string(),
            fault: fault.to_string(),
            promise,
            runs: Vec::new(),
        }
    }

    /// Checks one run against the promise (failing the test at once, with the run's log) and
    /// keeps it for the row.
    pub fn add(&mut self, m: Measure) {
        let what = format!("{}, {}", self.topology, self.fault);
        eprintln!(
            "{what}: lost {}, twice {}, again {}, overlaps {:?} ms, takeover {:?} ms, codes {:?}",
            m.lost, m.twice, m.rerun, m.overlaps, m.takeover, m.codes
        );
        assert_eq!(
            m.lost, 0,
            "{what}: a tick was lost (tick 2 started {} times)\n{}",
            m.starts_in_tick_2, m.explain
        );
        if self.promise.again != Again::Twice {
            assert_eq!(
                m.twice, 0,
                "{what}: a tick ran to its end twice\n{}",
                m.explain
            );
        }
        assert_eq!(
            m.starts_in_tick_2, 1,
            "{what}: the fault in tick 1 cost tick 2 (it ran {} times)\n{}",
            m.starts_in_tick_2, m.explain
        );
        if self.promise.again == Again::Never {
            assert_eq!(m.rerun, 0, "{what}: the tick was run again\n{}", m.explain);
        }
        let worst = m.overlaps.iter().copied().max().unwrap_or(0);
        match self.promise.overlap {
            None => assert!(
                m.overlaps.is_empty(),
                "{what}: two jobs were live at once ({:?} ms)\n{}",
                m.overlaps,
                m.explain
            ),
            Some(bound) => assert!(
                worst as u128 <= bound.as_millis(),
                "{what}: two jobs were live at once for {worst} ms, more than {bound:?}\n{}",
                m.explain
            ),
        }
        self.runs.push(m);
    }

    /// The row for the table.
    pub fn row(&self) -> String {
        let sum = |f: fn(&Measure) -> usize| -> usize { self.runs.iter().map(f).sum() };
        let overlaps: Vec<u64> = self.runs.iter().flat_map(|m| m.overlaps.clone()).collect();
        let overlaps = match overlaps.iter().max() {
            None => "**0**".to_string(),
            Some(w) => format!("{} (worst {w} ms)", overlaps.len()),
        };
        let takeovers: Vec<u64> = self.runs.iter().filter_map(|m| m.takeover).collect();
        let takeover = match takeovers.iter().max() {
            None => "none".to_string(),
            Some(w) => format!(
                "{} of {} runs (worst {w} ms)",
                takeovers.len(),
                self.runs.len()
            ),
        };
        let mut codes = BTreeMap::new();
        for m in &self.runs {
            for (c, n) in &m.codes {
                *codes.entry(*c).or_insert(0) += n;
            }
        }
        let codes = codes
            .iter()
            .map(|(c, n)| format!("{c}×{n}"))
            .collect::<Vec<_>>()
            .join(", ");
        let again = match self.promise.again {
            Again::Never => "once",
            Again::AfterAStop => "at least once, to its end once",
            Again::Twice => "at least once, to its end at most twice",
        };
        let promise = match self.promise.overlap {
            None => format!("{again}, never two at once"),
            Some(b) => format!("{again}, two at once ≤ {} ms", b.as_millis()),
        };
        format!(
            "| {} | {} | {promise} | {} | {} | {} | {} | {overlaps} | {takeover} | {codes} |",
            self.topology,
            self.fault,
            self.runs.len(),
            sum(|m| m.lost),
            sum(|m| m.twice),
            sum(|m| m.rerun),
        )
    }

    /// Prints the row and appends it to LOCKRUN_TICKS_REPORT.
    pub fn finish(self) {
        let row = self.row();
        eprintln!("{HEADER}\n{row}");
        append_row("LOCKRUN_TICKS_REPORT", HEADER, &row);
    }
}
