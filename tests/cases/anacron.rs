//! The guide's anacrontab line ([Under anacron](../../docs/guide.md), the ```` ```anacrontab ````
//! block) on Debian's real anacron: three "hosts" (each its own spool directory, so its own
//! record of the days it ran the job) start their anacron at the hours a laptop or a rebooted
//! server would, over four days around the end of summer time in Europe/Berlin (a 25-hour day).
//! One world clock for all of it, Redis included ([`Clock`], stepped to each start): Redis
//! expires the kept key by its wall clock, so a hold ends where it would on those days. Each day
//! must run the job exactly once across the hosts, and nothing may be mailed (anacron mails any
//! output). The control is the cron recipe's `--every 1d` line in the same anacrontab: it must
//! show both ways that fails under anacron (a day with no run, anacron marking it done; a day
//! with two), else the harness could not see either.

use crate::support::clockshim::{self, Clock};
use crate::support::cron::{fenced_block, now};
use crate::support::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

const HEADING: &str = "### Under anacron: one run per calendar day";
/// What the guide's line says, and what the control says instead.
const KEY: &str = "\"nightly-report-$(date +%F)\"";
const HOLD: &str = "--min-hold 25h";
const CONTROL_KEY: &str = "nightly-report";
const CONTROL_HOLD: &str = "--every 1d";
const JOB: &str = "/usr/local/bin/report.sh";
const URL: &str = "redis://redis.internal:6379";
/// The hosts' zone: 2024-10-27 is 25 hours long there (summer time ends).
const TZ: &str = "Europe/Berlin";

/// Debian's anacron: `LOCKRUN_TEST_ANACRON`, the copy `tests/ensure-anacron.sh` keeps in
/// target/test-tools/, or an installed one; else the test fails and says how to get it.
fn anacron() -> PathBuf {
    let cached = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-tools/anacron");
    std::env::var_os("LOCKRUN_TEST_ANACRON")
        .map(PathBuf::from)
        .into_iter()
        .chain([cached, PathBuf::from("/usr/sbin/anacron")])
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "anacron not found: `bash tests/ensure-anacron.sh` fetches Debian's into \
                 target/test-tools/, or point LOCKRUN_TEST_ANACRON at one"
            )
        })
}

/// One start of a host's anacron: when (local time in [`TZ`]), and whether it runs the job
/// (anacron's own decision: not when it already did that day).
struct Start {
    host: &'static str,
    at: &'static str,
    anacron_runs_it: bool,
}

const STARTS: &[Start] = &[
    // An evening start: the first run.
    Start {
        host: "a",
        at: "2024-10-25 19:30",
        anacron_runs_it: true,
    },
    // The next morning, on another host: 12 h later, inside --every 1d's 21.6 h hold.
    Start {
        host: "b",
        at: "2024-10-26 07:30",
        anacron_runs_it: true,
    },
    Start {
        host: "c",
        at: "2024-10-26 09:00",
        anacron_runs_it: true,
    },
    // Its hourly start again: anacron has marked the day done, whatever lockrun did.
    Start {
        host: "b",
        at: "2024-10-26 12:30",
        anacron_runs_it: false,
    },
    // A boot just after midnight, and a start late that (25-hour) day: 24.5 h apart.
    Start {
        host: "c",
        at: "2024-10-27 00:10",
        anacron_runs_it: true,
    },
    Start {
        host: "a",
        at: "2024-10-27 23:40",
        anacron_runs_it: true,
    },
    Start {
        host: "b",
        at: "2024-10-28 07:30",
        anacron_runs_it: true,
    },
];

/// Seconds since the epoch of a local time in [`TZ`] (by `date`, which reads the zone files).
fn epoch_of(local: &str) -> i64 {
    let out = Command::new("date")
        .env("TZ", TZ)
        .args(["-d", local, "+%s"])
        .output()
        .expect("date");
    let text = String::from_utf8_lossy(&out.stdout);
    text.trim()
        .parse()
        .unwrap_or_else(|_| panic!("date -d {local:?}: {text:?} {:?}", out.stderr))
}

/// The guide's block made into one host's anacrontab: the test's Redis and job; the control
/// has the cron recipe's key and hold instead of the day's key and 25 h.
fn anacrontab(block: &str, url: &str, job: &Path, control: bool) -> String {
    let lines: Vec<&str> = block
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .collect();
    assert_eq!(lines.len(), 1, "one anacrontab line in the guide: {block}");
    let line = lines[0];
    for part in [KEY, HOLD, JOB, URL] {
        assert_eq!(
            line.matches(part).count(),
            1,
            "the guide's anacrontab line has {part} once (update tests/cases/anacron.rs): {line}"
        );
    }
    let mut line = line
        .replace(URL, url)
        .replace(JOB, &job.display().to_string());
    if control {
        line = line.replace(KEY, CONTROL_KEY).replace(HOLD, CONTROL_HOLD);
    }
    format!("{line}\n")
}

/// Runs every start of [`STARTS`] with `line`; returns the days the job ran on, and how many
/// times on each (by the job's own `date +%F`), with the hosts that ran it.
fn play(block: &str, control: bool) -> BTreeMap<String, Vec<String>> {
    let anacron = anacron();
    let first = epoch_of(STARTS[0].at);
    let clock = Clock::new((first - now() as i64) * 1000);
    let redis = Server::with(ServerOptions {
        env: clock.env(),
        ..ServerOptions::default()
    });
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    // lockrun where `cargo install` puts it: found only through the line's own PATH prefix.
    std::fs::create_dir_all(home.join(".cargo/bin")).unwrap();
    std::os::unix::fs::symlink(lockrun_bin(), home.join(".cargo/bin/lockrun")).unwrap();
    let log = dir.path().join("runs.log");
    let job = dir.path().join("report.sh");
    std::fs::write(
        &job,
        format!(
            "#!/bin/sh\necho \"$(date +%F) $HOSTLABEL\" >> '{}'\n",
            log.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&job, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let tab = dir.path().join("anacrontab");
    std::fs::write(&tab, anacrontab(block, &redis.url(), &job, control)).unwrap();
    for start in STARTS {
        let spool = dir.path().join(format!("spool-{}", start.host));
        std::fs::create_dir_all(&spool).unwrap();
        clock.step_to((epoch_of(start.at) - now() as i64) * 1000);
        // anacron as a service starts it: `-d` keeps it in the foreground (its messages on
        // stderr), `-n` runs the job without the line's delay. The clock shim reaches anacron,
        // the job's shell and `date`, and lockrun: every one reads the day's clock.
        let mut cmd = Command::new(&anacron);
        cmd.args(["-d", "-n", "-t"])
            .arg(&tab)
            .arg("-S")
            .arg(&spool)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", &home)
            .env("TZ", TZ)
            .env("HOSTLABEL", start.host)
            .envs(clock.env())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("start anacron");
        wait_timeout(&mut child, Duration::from_secs(30))
            .unwrap_or_else(|| panic!("anacron of host {} at {} hangs", start.host, start.at));
        let out = child.wait_with_output().unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let ran = said.contains("Job `nightly-report' started");
        assert_eq!(
            ran,
            start.anacron_runs_it,
            "host {} at {}: anacron should {}run the job: {said}",
            start.host,
            start.at,
            if start.anacron_runs_it { "" } else { "not " }
        );
        assert!(
            !said.contains("mailing output"),
            "host {} at {}: nothing to mail: {said}",
            start.host,
            start.at
        );
    }
    let mut days: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for start in STARTS {
        days.entry(start.at[..10].to_string()).or_default();
    }
    for line in std::fs::read_to_string(&log).unwrap_or_default().lines() {
        let (day, host) = line.split_once(' ').unwrap();
        days.entry(day.to_string())
            .or_default()
            .push(host.to_string());
    }
    days
}

#[test]
fn anacron_runs_the_guides_line_once_per_calendar_day_across_hosts() {
    clockshim::library();
    let guide =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/guide.md"))
            .unwrap();
    let block = fenced_block(&guide, "docs/guide.md", HEADING, "anacrontab").unwrap();
    let days = play(&block, false);
    let want: BTreeMap<String, Vec<String>> = [
        ("2024-10-25", "a"),
        ("2024-10-26", "b"),
        ("2024-10-27", "c"),
        ("2024-10-28", "b"),
    ]
    .iter()
    .map(|(d, h)| (d.to_string(), vec![h.to_string()]))
    .collect();
    assert_eq!(days, want, "each day once, by the first host to start it");
    // The control: the 07:30 start finds the evening's hold and skips, anacron marks the day
    // done (no run on the 26th); the 24.5-hour day has two.
    let control = play(&block, true);
    let counts: Vec<(String, usize)> = control.iter().map(|(d, h)| (d.clone(), h.len())).collect();
    assert_eq!(
        counts,
        [
            ("2024-10-25".to_string(), 1),
            ("2024-10-26".to_string(), 0),
            ("2024-10-27".to_string(), 2),
            ("2024-10-28".to_string(), 0),
        ],
        "the --every 1d control: {control:?}"
    );
}
