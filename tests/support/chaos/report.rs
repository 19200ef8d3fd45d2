//! The checks run at the end of a scenario, and the results line.

use super::{Chaos, Mode, Section};
use crate::support::Server;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

/// How one lockrun ended.
pub(super) struct Outcome {
    pub pid: u32,
    pub label: String,
    pub code: i32,
    pub allowed: Vec<i32>,
    pub stderr: String,
}

pub(super) struct Violation {
    pub text: String,
    /// Whose stderr to show with it.
    pub lockruns: Vec<i32>,
}

impl Violation {
    pub fn new(text: String, lockruns: &[i32]) -> Violation {
        Violation {
            text,
            lockruns: lockruns.to_vec(),
        }
    }
}

/// The results line's columns.
pub const RESULTS_HEADER: &str = "| scenario | critical sections | faults injected | overlaps of live jobs (total ms) | stale writes rejected | max lease-expiry→job-gone ms |\n|---|---|---|---|---|---|";

/// Findings accumulated by the checks.
struct Findings<'a> {
    ch: &'a Chaos,
    v: Vec<Violation>,
    overlaps: usize,
    overlap_ms: f64,
    worst_overlap_ms: f64,
    fence_disorder: usize,
}

/// A section's end, or now for one still running (which `report` has already flagged).
fn end_of(s: &Section) -> Instant {
    s.gone().unwrap_or_else(Instant::now)
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

impl Findings<'_> {
    /// A moment as ms since the scenario started, for messages.
    fn at(&self, t: Instant) -> f64 {
        millis(t.saturating_duration_since(self.ch.start))
    }

    fn push(&mut self, text: String, lockruns: &[i32]) {
        self.v.push(Violation::new(text, lockruns));
    }

    /// Counted always; a violation unless the scenario expects overlaps.
    fn overlap(&mut self, d: f64, text: String, lockruns: &[i32]) {
        self.overlaps += 1;
        self.overlap_ms += d;
        self.worst_overlap_ms = self.worst_overlap_ms.max(d);
        if !self.ch.allow_overlap {
            self.push(text, lockruns);
        }
    }

    /// Counted (for the availability table) and a violation: no scenario expects fences out
    /// of start order.
    fn fence_disorder(&mut self, text: String, lockruns: &[i32]) {
        self.fence_disorder += 1;
        self.push(text, lockruns);
    }

    /// (a) on an exclusive key: any two sections live at the same time.
    fn exclusive_overlaps(&mut self, key: &str, secs: &[&Section]) {
        for (i, a) in secs.iter().enumerate() {
            for b in &secs[i + 1..] {
                if b.begin >= end_of(a) {
                    continue;
                }
                let d = millis(end_of(a).min(end_of(b)).saturating_duration_since(b.begin));
                let text = format!(
                    "overlap on {key}: job {} (lockrun {}, fence {}, {:.1}..{:.1} ms) and job {} (lockrun {}, fence {}, {:.1}..{:.1} ms) both live for {d:.1} ms",
                    a.pid, a.lockrun, a.fence, self.at(a.begin), self.at(end_of(a)),
                    b.pid, b.lockrun, b.fence, self.at(b.begin), self.at(end_of(b))
                );
                self.overlap(d, text, &[a.lockrun, b.lockrun]);
            }
        }
    }

    /// (a) on a semaphore: more than `n` sections live at once (a sweep over begins and ends;
    /// ends first on ties, since an end at the instant of a begin is a hand-over).
    fn limit_overlaps(&mut self, key: &str, n: usize, secs: &[&Section]) {
        let mut events: Vec<(Instant, i32, &Section)> = Vec::new();
        for s in secs {
            events.push((s.begin, 1, s));
            events.push((end_of(s), -1, s));
        }
        events.sort_by_key(|e| (e.0, e.1));
        let mut running = 0i32;
        let mut excess: Option<(Instant, &Section, i32)> = None;
        for (t, step, s) in events {
            running += step;
            if running > n as i32 && excess.is_none() {
                excess = Some((t, s, running));
            } else if running <= n as i32 {
                if let Some((since, first, count)) = excess.take() {
                    let text = format!(
                        "{count} live holders of {key} (limit {n}) from {:.1} ms for {:.1} ms, when job {} (lockrun {}, fence {}) began",
                        self.at(since), millis(t - since), first.pid, first.lockrun, first.fence
                    );
                    self.overlap(millis(t - since), text, &[first.lockrun]);
                }
            }
        }
    }

    /// (b) fences: strictly increasing in begin order on an exclusive key, distinct on a
    /// semaphore (concurrent holders begin in any order), and above every older fence after a
    /// restart of the server.
    fn fences(&mut self, key: &str, mode: Mode, secs: &[&Section], restarts: &[Instant]) {
        match mode {
            Mode::Exclusive => {
                for w in secs.windows(2) {
                    if w[1].fence <= w[0].fence {
                        let text = format!(
                            "fence did not increase on {key}: job {} began at {:.1} ms with fence {} after job {} with fence {}",
                            w[1].pid, self.at(w[1].begin), w[1].fence, w[0].pid, w[0].fence
                        );
                        self.fence_disorder(text, &[w[0].lockrun, w[1].lockrun]);
                    }
                }
            }
            Mode::Limit(_) => {
                let mut seen: HashMap<u64, &Section> = HashMap::new();
                for s in secs {
                    if let Some(o) = seen.insert(s.fence, s) {
                        let text = format!(
                            "fence {} handed out twice on {key}: jobs {} and {}",
                            s.fence, o.pid, s.pid
                        );
                        self.fence_disorder(text, &[o.lockrun, s.lockrun]);
                    }
                }
            }
        }
        for &r in restarts {
            let before = secs.iter().filter(|s| s.begin < r).map(|s| s.fence).max();
            for s in secs.iter().filter(|s| s.begin > r) {
                if let Some(b) = before.filter(|&b| s.fence <= b) {
                    let text = format!(
                        "fence went backwards over the restart at {:.1} ms on {key}: job {} got {} after {b} was handed out",
                        self.at(r), s.pid, s.fence
                    );
                    self.fence_disorder(text, &[s.lockrun]);
                }
            }
        }
    }

    /// (c), (d): exit codes and panics. Returns exit code → count.
    fn outcomes(&mut self, outcomes: &[Outcome]) -> BTreeMap<i32, usize> {
        let mut codes = BTreeMap::new();
        for o in outcomes {
            *codes.entry(o.code).or_default() += 1;
            if o.stderr.contains("panicked") || o.code == 101 {
                let text = format!("lockrun {} ({}) panicked (exit {})", o.pid, o.label, o.code);
                self.push(text, &[o.pid as i32]);
            } else if !o.allowed.contains(&o.code) {
                let text = format!(
                    "lockrun {} ({}) exited {}, expected one of {:?}",
                    o.pid, o.label, o.code, o.allowed
                );
                self.push(text, &[o.pid as i32]);
            }
        }
        codes
    }

    /// (e): every lock key is gone within its TTL (+1 s) once the scenario is over, on every
    /// data node (a node that does not answer counts as not holding it).
    fn keys_gone(&mut self, sockets: &[PathBuf], keys: &[(String, Duration)]) {
        for socket in sockets {
            for (key, ttl) in keys {
                let deadline = Instant::now() + *ttl + Duration::from_secs(1);
                let mut left: Option<i64> = None;
                while Instant::now() < deadline {
                    left = pttl(socket, key).filter(|&p| p != -2);
                    if left.is_none() {
                        break;
                    }
                    thread::sleep(Duration::from_millis(10));
                }
                if let Some(p) = left {
                    let text = format!(
                        "key {key} still exists on {} {ttl:?} + 1 s after the scenario (PTTL {p})",
                        socket.display()
                    );
                    self.push(text, &[]);
                }
            }
        }
    }
}

/// For each lease that ended without its holder's doing (expiry, hand DEL, restart), how long
/// the job lived on (ms; negative: the last job was gone that long before). Exclusive keys.
fn expiry_to_gone(
    ch: &Chaos,
    by_key: &BTreeMap<&str, Vec<&Section>>,
    ends: &[(String, Instant)],
) -> Option<f64> {
    let mut worst: Option<f64> = None;
    for (key, t) in ends {
        let Some(secs) = by_key.get(key.as_str()) else {
            continue;
        };
        if ch.recorder.mode(key) != Mode::Exclusive {
            continue;
        }
        let outlived = secs
            .iter()
            .filter(|s| s.live_at(*t))
            .map(|s| end_of(s) - *t)
            .max();
        let d = match outlived {
            Some(d) => millis(d),
            None => match secs.iter().filter(|s| s.begin < *t).max_by_key(|s| s.begin) {
                Some(s) => -millis(*t - end_of(s)),
                None => continue,
            },
        };
        worst = Some(worst.map_or(d, |w| w.max(d)));
    }
    worst
}

impl Chaos {
    /// Runs every check, prints the results line (and appends it to LOCKRUN_FAULTS_REPORT),
    /// and returns the report. Call when every lockrun has been finished.
    pub fn report(&self, redis: &Server) -> Report {
        self.report_on(std::slice::from_ref(&redis.socket))
    }

    /// [`Chaos::report`] over several data nodes: check (e) on each of `sockets`.
    pub fn report_on(&self, sockets: &[PathBuf]) -> Report {
        let mut f = Findings {
            ch: self,
            v: std::mem::take(&mut *self.problems.lock().unwrap()),
            overlaps: 0,
            overlap_ms: 0.0,
            worst_overlap_ms: 0.0,
            fence_disorder: 0,
        };
        let left: Vec<i32> = self.live().iter().map(|&p| p as i32).collect();
        if !left.is_empty() {
            f.push(
                format!("report() with lockruns still running: {left:?}"),
                &left,
            );
        }
        // Jobs that outlived their lockrun (killed lockrun, job ignoring SIGTERM) must be
        // gone soon; one that is not is a violation, and is killed so it stops writing.
        for pid in self.recorder.settle(Duration::from_secs(5)) {
            f.push(
                format!("job {pid} still running after every lockrun ended; killed"),
                &[],
            );
            // SAFETY: plain kill(2) of a job this scenario started.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        for e in self.recorder.errors() {
            f.push(format!("job protocol error: {e}"), &[]);
        }
        let sections = self.recorder.sections();
        let mut by_key: BTreeMap<&str, Vec<&Section>> = BTreeMap::new();
        for s in &sections {
            by_key.entry(&s.key).or_default().push(s);
        }
        let restarts = self.restarts.lock().unwrap().clone();
        for (key, secs) in &by_key {
            let mode = self.recorder.mode(key);
            match mode {
                Mode::Exclusive => f.exclusive_overlaps(key, secs),
                Mode::Limit(n) => f.limit_overlaps(key, n, secs),
            }
            f.fences(key, mode, secs, &restarts);
        }
        // A rejected write means a holder wrote after a newer one: an overlap by another name.
        let stale: u64 = sections.iter().map(|s| s.stale as u64).sum();
        if stale > 0 && !self.allow_overlap {
            f.push(
                format!("{stale} stale writes rejected in a scenario where no holder may outlive its lease"),
                &[],
            );
        }
        let outcomes = self.outcomes.lock().unwrap();
        let codes = f.outcomes(&outcomes);
        f.keys_gone(sockets, &self.keys.lock().unwrap());
        let logs: HashMap<i32, (&str, &str)> = outcomes
            .iter()
            .map(|o| (o.pid as i32, (o.label.as_str(), o.stderr.as_str())))
            .collect();
        let report = Report {
            scenario: self.name.clone(),
            seed: self.seed,
            sections: sections.len(),
            faults: self.faults.load(Ordering::SeqCst),
            overlaps: f.overlaps,
            overlap_ms: f.overlap_ms,
            worst_overlap_ms: f.worst_overlap_ms,
            fence_disorder: f.fence_disorder,
            stale,
            expiry_to_gone_ms: expiry_to_gone(self, &by_key, &self.lease_ends.lock().unwrap()),
            codes,
            violations: f.v.iter().map(|v| v.text.clone()).collect(),
            details: details(&f.v, &logs, &self.fault_log.lock().unwrap()),
        };
        report.publish();
        report
    }
}

/// For a failure message: the faults, and the end of the stderr of each lockrun involved.
fn details(v: &[Violation], logs: &HashMap<i32, (&str, &str)>, faults: &[String]) -> String {
    let mut out = String::new();
    if !faults.is_empty() {
        let _ = writeln!(out, "faults injected:\n  {}", faults.join("\n  "));
    }
    let mut shown = HashSet::new();
    for pid in v.iter().flat_map(|v| &v.lockruns) {
        if shown.len() >= 6 || !shown.insert(*pid) {
            continue;
        }
        if let Some((label, stderr)) = logs.get(pid) {
            let lines: Vec<&str> = stderr.lines().collect();
            let tail = &lines[lines.len().saturating_sub(15)..];
            let _ = writeln!(
                out,
                "stderr of lockrun {pid} ({label}), last lines:\n  {}",
                tail.join("\n  ")
            );
        }
    }
    out
}

pub struct Report {
    pub scenario: String,
    pub seed: u64,
    pub sections: usize,
    pub faults: u64,
    pub overlaps: usize,
    pub overlap_ms: f64,
    /// The longest single overlap.
    pub worst_overlap_ms: f64,
    /// Fences out of start order (or repeated on a semaphore, or not above a restart's).
    pub fence_disorder: usize,
    pub stale: u64,
    pub expiry_to_gone_ms: Option<f64>,
    /// Exit code → how many lockruns exited with it.
    pub codes: BTreeMap<i32, usize>,
    pub violations: Vec<String>,
    details: String,
}

impl Report {
    pub fn line(&self) -> String {
        let gone = self
            .expiry_to_gone_ms
            .map_or("-".to_string(), |d| format!("{d:+.0}"));
        format!(
            "| {} | {} | {} | {} ({:.0} ms) | {} | {} |",
            self.scenario,
            self.sections,
            self.faults,
            self.overlaps,
            self.overlap_ms,
            self.stale,
            gone
        )
    }

    fn publish(&self) {
        eprintln!(
            "{RESULTS_HEADER}\n{}\nexit codes: {:?}",
            self.line(),
            self.codes
        );
        append_row("LOCKRUN_FAULTS_REPORT", RESULTS_HEADER, &self.line());
    }

    /// A scenario-specific requirement: recorded as a violation if `ok` is false.
    pub fn require(&mut self, ok: bool, what: impl Into<String>) {
        if !ok {
            self.violations.push(what.into());
        }
    }

    /// Panics with the seed, the violations and the involved lockruns' logs.
    pub fn assert(&self) {
        if self.violations.is_empty() {
            return;
        }
        // A broken lock can produce hundreds; the first ones tell the story.
        const SHOWN: usize = 25;
        let mut list = self.violations[..self.violations.len().min(SHOWN)].join("\n- ");
        if self.violations.len() > SHOWN {
            list += &format!("\n- ... and {} more", self.violations.len() - SHOWN);
        }
        panic!(
            "scenario={} seed={} (replay: LOCKRUN_FAULTS_SEED={}): {} violation(s):\n- {list}\n{}\n{}",
            self.scenario,
            self.seed,
            self.seed,
            self.violations.len(),
            self.line(),
            self.details
        );
    }
}

/// `PTTL key` on the server behind a unix socket; None when it does not answer.
fn pttl(socket: &Path, key: &str) -> Option<i64> {
    let client = redis::Client::open(format!("unix://{}", socket.display())).ok()?;
    // Bounded: a paused server must not hang the report.
    let mut conn = client
        .get_connection_with_timeout(Duration::from_secs(1))
        .ok()?;
    conn.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    redis::cmd("PTTL").arg(key).query(&mut conn).ok()
}

/// Appends `row` to the markdown table in the file named by the environment variable `var`
/// (nothing if it is unset), writing `header` first into a new or empty file. One writer at a
/// time, so the header is written once and rows never interleave.
pub fn append_row(var: &str, header: &str, row: &str) {
    let Ok(path) = std::env::var(var) else {
        return;
    };
    static FILE: Mutex<()> = Mutex::new(());
    let _guard = FILE.lock().unwrap();
    let fresh = std::fs::metadata(&path).map_or(true, |m| m.len() == 0);
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("{var}={path}: {e}"));
    if fresh {
        let _ = writeln!(f, "{header}");
    }
    let _ = writeln!(f, "{row}");
}
