//! The results table: one row per fault kind over both configurations, and what the rows
//! cannot say (a thawed job's last moments, an orphaned `sleep`, the requests of a healthy
//! tick).

use super::{Checked, Config, Fault, KindRow, FAULT_AFTER, STEPS, TTL};
use std::collections::BTreeMap;
use Fault::*;

impl KindRow {
    /// Adds another configuration's row of the same kind.
    fn add(&mut self, r: &KindRow) {
        self.ticks += r.ticks;
        self.takeovers += r.takeovers;
        self.lost += r.lost;
        self.duplicates += r.duplicates;
        self.overlaps.extend(&r.overlaps);
        self.to_takeover.extend(&r.to_takeover);
        self.after_thaw.extend(&r.after_thaw);
        self.steps_after_thaw += r.steps_after_thaw;
        self.leader_after.extend(&r.leader_after);
        self.job_after.extend(&r.job_after);
        self.histories.extend(r.histories.iter().cloned());
        self.own_lines.extend(r.own_lines.iter().cloned());
        self.takeover_warns += r.takeover_warns;
    }
}

/// The report of every configuration's checks: `line` is the guide's crontab line,
/// `busybox_version` the first line of busybox's own.
pub fn report(
    configs: &[Config],
    checked: &[Checked],
    busybox_version: &str,
    line: &str,
) -> String {
    let mut rows: BTreeMap<Fault, KindRow> = BTreeMap::new();
    let (mut winner, mut standby) = (Vec::new(), Vec::new());
    for c in checked {
        for (kind, r) in &c.rows {
            rows.entry(*kind).or_default().add(r);
        }
        winner.extend(c.winner.iter().cloned());
        standby.extend(c.standby.iter().cloned());
    }
    let ticks: usize = rows.values().map(|r| r.ticks).sum();
    let caption = format!(
        "Real cron daemons, Debian cron and busybox crond ({busybox_version}), each host in its \
         own mount, UTS, PID and network namespace; two configurations of three hosts at once \
         against one Redis, {ticks} ticks in all ({}). Crontab line: the guide's `{line}` with \
         `--ttl {TTL}`; the job: {STEPS} steps of `sleep 1`.",
        hosts(configs)
    );
    let mut report = table(&caption, &rows);
    let frozen = rows.get(&Frozen);
    let orphaned = rows.get(&LockrunKilled);
    report += &format!(
        "\nA frozen host's job, thawed, was gone {} (median / max, at most: looks every 10 ms) \
         after the thaw, stopped by its lockrun, and did {} step(s) in that time. A job whose \
         lockrun alone was SIGKILLed: its shell was found dead {} after the kill, its last \
         process (the `sleep 1` the shell left in its group) last seen alive {} after the \
         kill. Takeover WARN lines mailed or printed: {} for {} takeovers. Requests to Redis on \
         a healthy tick (MONITOR, by host): the host that ran the job {}; each standby {}.\n",
        millis(frozen.map_or(&[], |r| &r.after_thaw)),
        frozen.map_or(0, |r| r.steps_after_thaw),
        millis(orphaned.map_or(&[], |r| &r.leader_after)),
        millis(orphaned.map_or(&[], |r| &r.job_after)),
        rows.values().map(|r| r.takeover_warns).sum::<usize>(),
        rows.values().map(|r| r.takeovers).sum::<usize>(),
        requests(&winner),
        requests(&standby),
    );
    report
}

/// The configurations' hosts: daemon, clock skew and where lockrun is.
fn hosts(configs: &[Config]) -> String {
    configs
        .iter()
        .map(|c| {
            let h: Vec<String> = c
                .hosts
                .iter()
                .map(|h| {
                    let skew = if h.skew != 0 {
                        format!(" {:+} s", h.skew)
                    } else {
                        String::new()
                    };
                    format!("{}{skew}, {}", h.daemon.label(), h.channel.label())
                })
                .collect();
            format!("{}: {}", c.label, h.join("; "))
        })
        .collect::<Vec<_>>()
        .join(" — ")
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn seconds(v: &[f64]) -> String {
    if v.is_empty() {
        return "—".into();
    }
    let mut v = v.to_vec();
    let max = v.iter().copied().fold(f64::MIN, f64::max);
    format!("{:.2} / {:.2} s", median(&mut v), max)
}

/// Seconds as `median / max ms`.
fn millis(v: &[f64]) -> String {
    if v.is_empty() {
        return "—".into();
    }
    let mut ms: Vec<f64> = v.iter().map(|s| s * 1000.0).collect();
    let max = ms.iter().copied().fold(f64::MIN, f64::max);
    format!("{:.0} / {max:.0} ms", median(&mut ms))
}

fn requests(v: &[(usize, BTreeMap<String, usize>)]) -> String {
    if v.is_empty() {
        return "—".into();
    }
    let mut n: Vec<f64> = v.iter().map(|(n, _)| *n as f64).collect();
    let (min, max) = (
        n.iter().copied().fold(f64::MAX, f64::min),
        n.iter().copied().fold(f64::MIN, f64::max),
    );
    let mut all: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, by) in v {
        for (cmd, k) in by {
            *all.entry(cmd).or_default() += k;
        }
    }
    let each: Vec<String> = all
        .iter()
        .map(|(cmd, k)| format!("{cmd} {:.1}", *k as f64 / v.len() as f64))
        .collect();
    format!(
        "median {} (min {min}, max {max}; on average {})",
        median(&mut n),
        each.join(", ")
    )
}

fn table(caption: &str, rows: &BTreeMap<Fault, KindRow>) -> String {
    let mut t = format!(
        "{caption}\n\n| fault injected on the host that took the tick, ~{FAULT_AFTER} s into its job | \
         ticks | takeovers | ticks lost | duplicates | overlaps (longest) | fault → takeover's job \
         start, median / max (TTL {TTL}) | `lockrun history` of the tick | the faulted host's own \
         lines (mailed) |\n|---|---|---|---|---|---|---|---|---|\n"
    );
    for (kind, r) in rows {
        let overlaps = match r
            .overlaps
            .iter()
            .copied()
            .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))))
        {
            None => "0".to_string(),
            Some(m) => format!("{} ({:.1} ms)", r.overlaps.len(), m * 1000.0),
        };
        let mut own: Vec<String> = r.own_lines.iter().map(|l| format!("`{l}`")).collect();
        if own.is_empty() {
            own.push("none".into());
        }
        t += &format!(
            "| {} | {} | {} | {} | {} | {overlaps} | {} | {} | {} |\n",
            kind.label(),
            r.ticks,
            r.takeovers,
            r.lost,
            r.duplicates,
            seconds(&r.to_takeover),
            r.histories.iter().cloned().collect::<Vec<_>>().join("; "),
            own.join(", ")
        );
    }
    t
}
