//! The README's crontab line on real Debian `cron` daemons: the same line on three "hosts" (each
//! a `cron -f` in its own mount, UTS and PID namespace, see `support::cron`), one Redis, and each
//! minute exactly one host runs the job while the others skip silently. Configurations run at
//! the same time, each with its own key and job log: synced clocks or clocks 5 s apart
//! (libfaketime), a 0.3 s job or a 7 s one, and a control, the same line without its hold, which
//! must show a tick run on more than one host (else the harness could not see a duplicate).
//!
//! The crontab is the README's block (so the docs are what is tested), with the test's Redis,
//! key and job. `LOCKRUN_CRON_LINE` replaces its schedule line, `LOCKRUN_CRON_MINUTES` sets the
//! minutes observed (default 3; the test takes about that plus 1–2 minutes), and
//! `LOCKRUN_CRON_REPORT=<file>` writes the results table there:
//!
//! `LOCKRUN_CRON_MINUTES=30 LOCKRUN_CRON_REPORT=cron.md cargo test --test lockrun cron_ -- --nocapture`
//!
//! Root only (mounts and namespaces); `bash tests/ensure-cron.sh` installs cron and libfaketime.
//! (libfaketime 0.9.10 hangs redis-server at start, but runs Debian's cron fine: the skew shows
//! in the fire times, which the test checks, so no shim of our own is needed.)

use crate::support::cron::*;
use crate::support::*;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::thread;

/// One set of three hosts under one key.
struct Config {
    name: &'static str,
    /// For the table.
    label: &'static str,
    key: &'static str,
    /// Each daemon's clock minus the real one, in seconds.
    skews: [i32; 3],
    /// The job's `sleep`.
    job_secs: &'static str,
    /// The line without its hold: must show duplicates.
    control: bool,
}

const CONFIGS: [Config; 5] = [
    Config {
        name: "synced-fast",
        label: "synced clocks, 0.3 s job",
        key: "cron-synced-fast",
        skews: [0, 0, 0],
        job_secs: "0.3",
        control: false,
    },
    Config {
        name: "synced-slow",
        label: "synced clocks, 7 s job",
        key: "cron-synced-slow",
        skews: [0, 0, 0],
        job_secs: "7",
        control: false,
    },
    Config {
        name: "skewed-fast",
        label: "clocks +5 s / 0 / −5 s, 0.3 s job",
        key: "cron-skewed-fast",
        skews: [5, 0, -5],
        job_secs: "0.3",
        control: false,
    },
    Config {
        name: "skewed-slow",
        label: "clocks +5 s / 0 / −5 s, 7 s job",
        key: "cron-skewed-slow",
        skews: [5, 0, -5],
        job_secs: "7",
        control: false,
    },
    Config {
        name: "control",
        label: "control: the line without its hold, synced clocks, 0.3 s job",
        key: "cron-control",
        skews: [0, 0, 0],
        job_secs: "0.3",
        control: true,
    },
];

/// Where in a second each configuration's three daemons start. Debian's cron sleeps whole
/// seconds and fires at :01 of the minute plus the fraction of a second it started at, so these
/// spread the hosts' fires over 0.8 s, as on real hosts (synced clocks never fire together).
/// Only at first: when a job ends, the SIGCHLD interrupts cron's sleep, which it resumes in whole
/// seconds from that moment, so from then on a daemon fires at the fraction its last job ended
/// at (seen here: the host that ran a 0.3 s job fires 0.3 s later the next minute; a 7 s job or
/// a skip moves it by a few ms). The hosts' fires wander within the second as on real hosts.
const FRACTIONS: [f64; 3] = [0.05, 0.45, 0.85];

/// The control's mail capture check: one job of one daemon prints this once, so cron must mail
/// it and the recorder must keep it (a "no mail" result means nothing otherwise).
const MAIL_CHECK: &str = "lockrun-cron-mail-capture-check";

/// A fire belongs to its daemon when lockrun started this far after the minute by the daemon's
/// clock (`offset + skew`): Debian's cron fires within second :01 (at a fraction that wanders,
/// see [`FRACTIONS`]), plus lockrun starting on a loaded machine. The test's skews are 5 s
/// apart, so a daemon whose clock is not skewed as asked stands out.
const FIRE_WINDOW: (f64, f64) = (0.5, 4.0);

/// What one configuration found.
struct Outcome {
    row: Row,
    problems: Vec<String>,
    /// Each host's median fire time (s after the real minute), for the log.
    fires: String,
    /// Each tick's attempts by host (LOCKRUN_CRON_VERBOSE=1 prints them).
    timeline: String,
}

/// A configuration, set up in the main thread (a README the harness cannot use fails at once).
struct Setup<'a> {
    config: &'a Config,
    dir: tempfile::TempDir,
    crontab: String,
    job_log: PathBuf,
    maildir: PathBuf,
    layer: PathBuf,
}

/// The job: one line per run in the job log, written with one `printf >>` (one write(2) with
/// O_APPEND: lines of concurrent runs never interleave). It prints nothing, so cron mails
/// nothing unless lockrun itself prints.
fn job_script(dir: &Path, log: &Path, secs: &str) -> PathBuf {
    let path = dir.join("job.sh");
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\n\
             start=$(date +%s.%N)\n\
             sleep {secs}\n\
             end=$(date +%s.%N)\n\
             printf '%s %s %s\\n' \"$(uname -n)\" \"$start\" \"$end\" >> '{}'\n",
            log.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn setup<'a>(config: &'a Config, block: &str, line: Option<&str>, url: &str) -> Setup<'a> {
    let dir = tempfile::tempdir().unwrap();
    let job_log = dir.path().join("job.log");
    let maildir = dir.path().join("mail");
    let layer = sendmail_layer(dir.path(), &maildir);
    let job = job_script(dir.path(), &job_log, config.job_secs);
    let extra = if config.control {
        // mkdir succeeds once: the first daemon to fire prints, once.
        vec![format!(
            "* * * * * mkdir '{}' 2>/dev/null && echo {MAIL_CHECK} from $(uname -n)",
            dir.path().join("mail-check").display()
        )]
    } else {
        Vec::new()
    };
    let spec = CrontabSpec {
        url,
        key: config.key,
        job: &job,
        lockrun: lockrun_bin(),
        line,
        control: config.control,
        extra: &extra,
    };
    let crontab = build_crontab(block, &spec).unwrap_or_else(|e| {
        panic!(
            "{}: the README's crontab block cannot be tested as it is: {e}\nthe block:\n{block}",
            config.name
        )
    });
    Setup {
        config,
        dir,
        crontab,
        job_log,
        maildir,
        layer,
    }
}

/// The schedule every configuration keeps (real clock).
struct Schedule {
    /// The second the daemons start in (plus [`FRACTIONS`]).
    start: f64,
    /// Every daemon runs by then.
    ready_by: f64,
    /// The ticks observed (minutes since the epoch).
    ticks: BTreeSet<i64>,
    /// After the last tick's jobs, long before the next tick's first fire.
    stop_at: f64,
}

/// Runs one configuration's daemons through the schedule and checks what they did.
fn run(setup: &Setup, index: usize, sched: &Schedule, tools: &Tools, url: &str) -> Outcome {
    let (skews, problems) = run_daemons(setup, index, sched, tools);
    check(setup, sched, url, &skews, problems)
}

/// Starts the three daemons at their fractions of a second, keeps them until `stop_at`, and
/// stops them once their jobs have ended. Returns each host's skew, and what went wrong.
fn run_daemons(
    setup: &Setup,
    index: usize,
    sched: &Schedule,
    tools: &Tools,
) -> (BTreeMap<String, i32>, Vec<String>) {
    let c = setup.config;
    let mut problems = Vec::new();
    let mut daemons = Vec::new();
    for (k, (frac, skew)) in FRACTIONS.iter().zip(c.skews).enumerate() {
        // The configurations' daemons a little apart, not all five forked at the same instant.
        sleep_until(sched.start + frac + 0.02 * index as f64);
        daemons.push(CronDaemon::start(&DaemonSpec {
            dir: setup.dir.path().join(format!("host{}", k + 1)),
            host: format!("host{}", k + 1),
            crontab: &setup.crontab,
            sendmail_layer: &setup.layer,
            skew_s: skew,
            libfaketime: &tools.libfaketime,
        }));
    }
    for d in daemons.iter_mut() {
        if let Err(e) = d.wait_ready(sched.ready_by) {
            problems.push(e);
        }
    }
    // Waiting out the ticks; a daemon that dies on the way is a failure (its ticks then look
    // fine, one host fewer proving nothing).
    while now() < sched.stop_at {
        sleep_until((now() + 5.0).min(sched.stop_at));
        for d in daemons.iter_mut() {
            if let Err(e) = d.check_alive() {
                if !problems.contains(&e) {
                    problems.push(e);
                }
            }
        }
    }
    for d in daemons.iter_mut() {
        problems.extend(d.stop(PATIENCE));
    }
    let skews = daemons.iter().map(|d| (d.host.clone(), d.skew_s)).collect();
    (skews, problems)
}

/// Checks a configuration's job log, `lockrun history` and mail; adds to `problems`.
fn check(
    setup: &Setup,
    sched: &Schedule,
    url: &str,
    skews: &BTreeMap<String, i32>,
    mut problems: Vec<String>,
) -> Outcome {
    let c = setup.config;
    // The job log, by tick.
    let text = std::fs::read_to_string(&setup.job_log).unwrap_or_default();
    let runs = parse_job_log(&text).unwrap_or_else(|e| {
        problems.push(e);
        Vec::new()
    });
    let hist = histogram(&runs, &sched.ticks);
    let mut per_tick: BTreeMap<i64, Vec<&JobRun>> =
        sched.ticks.iter().map(|t| (*t, Vec::new())).collect();
    for r in &runs {
        if let Some(v) = per_tick.get_mut(&tick_of(r.start)) {
            v.push(r);
        }
    }
    for (tick, rs) in &per_tick {
        let hosts: Vec<String> = rs
            .iter()
            .map(|r| format!("{} at {:.3}", r.host, r.start))
            .collect();
        if rs.is_empty() || (rs.len() > 1 && !c.control) {
            let expected = if c.control { "at least" } else { "exactly" };
            problems.push(format!(
                "tick {}: {} runs, {expected} one expected: {hosts:?}",
                hhmm(*tick),
                rs.len()
            ));
        }
    }
    if c.control && !per_tick.values().any(|rs| rs.len() > 1) {
        problems.push(format!(
            "the control (the line without its hold) ran the job once every tick ({hist:?}): the \
             harness cannot tell a duplicate from none, so the other results prove nothing. Are \
             the daemons' fires spread over the second (see the fire times above)?"
        ));
    }

    // lockrun's own account, compared with the job log; and every daemon fired every tick.
    let mut cmd = Lockrun::bare();
    cmd.args(["history", c.key, "--json", "-n", "10000", "-r", url]);
    let out = crate::support::run(cmd);
    let history = if out.status.success() {
        parse_history(&stdout_of(&out)).unwrap_or_else(|e| {
            problems.push(e);
            Vec::new()
        })
    } else {
        problems.push(format!("lockrun history failed: {}", stderr_of(&out)));
        Vec::new()
    };
    problems.extend(match_history(&runs, &history));
    let mut fired: BTreeMap<(i64, &str), Vec<f64>> = BTreeMap::new();
    // Tick by tick, each host's attempts: outcome and start (s after the real minute).
    let mut timeline: BTreeMap<i64, Vec<String>> = BTreeMap::new();
    for e in history.iter().rev() {
        let tick = tick_of(e.start());
        let offset = e.start() - (tick * 60) as f64;
        timeline
            .entry(tick)
            .or_default()
            .push(format!("{} {} {offset:+.2}", e.host, e.outcome));
        if sched.ticks.contains(&tick) && (e.outcome == "ran" || e.outcome == "skipped") {
            fired.entry((tick, &e.host)).or_default().push(offset);
        }
    }
    let timeline: String = timeline
        .iter()
        .map(|(tick, v)| {
            let seen = if sched.ticks.contains(tick) {
                ""
            } else {
                " (not observed)"
            };
            format!("  {}{seen}: {}\n", hhmm(*tick), v.join(", "))
        })
        .collect();
    let mut by_host: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for tick in &sched.ticks {
        for (host, skew) in skews {
            let offsets = fired
                .get(&(*tick, host.as_str()))
                .cloned()
                .unwrap_or_default();
            if offsets.len() != 1 {
                problems.push(format!(
                    "tick {}: {host} fired {} times by lockrun's history (once expected)",
                    hhmm(*tick),
                    offsets.len()
                ));
            }
            for off in &offsets {
                let own = off + *skew as f64;
                if own < FIRE_WINDOW.0 || own > FIRE_WINDOW.1 {
                    problems.push(format!(
                        "tick {}: {host} (clock {skew:+} s) fired {off:+.3} s after the real \
                         minute, {own:+.3} s by its own clock: not its skew (expected {:+} to \
                         {:+} s by its clock)",
                        hhmm(*tick),
                        FIRE_WINDOW.0,
                        FIRE_WINDOW.1
                    ));
                }
            }
            by_host.entry(host).or_default().extend(offsets);
        }
    }
    let fires = by_host
        .iter_mut()
        .map(|(host, offs)| {
            offs.sort_by(f64::total_cmp);
            let median = offs.get(offs.len() / 2).copied().unwrap_or(f64::NAN);
            format!("{host} ({:+} s) {median:+.2} s", skews[*host])
        })
        .collect::<Vec<_>>()
        .join(", ");

    // Mail: none, except the control's capture check, exactly once.
    let all = mails(&setup.maildir);
    let (checks, others): (Vec<&String>, Vec<&String>) =
        all.iter().partition(|m| m.contains(MAIL_CHECK));
    if !others.is_empty() {
        problems.push(format!(
            "cron mailed {} time(s): lockrun or the job printed something; the first:\n{}",
            others.len(),
            others[0]
        ));
    }
    if c.control && checks.len() != 1 {
        problems.push(format!(
            "the mail capture check: {} mails with {MAIL_CHECK} (one expected): the recorder at \
             /usr/sbin/sendmail does not work, so \"no mail\" proves nothing",
            checks.len()
        ));
    }
    if !problems.is_empty() {
        problems.push(format!(
            "lockrun history by tick:\n{timeline}the job log:\n{text}"
        ));
    }
    Outcome {
        row: Row {
            configuration: c.label.to_string(),
            minutes: sched.ticks.len(),
            histogram: hist,
            mails: if c.control {
                format!("{} (+{} capture check)", others.len(), checks.len())
            } else {
                others.len().to_string()
            },
        },
        problems,
        fires,
        timeline,
    }
}

/// The schedule line the test runs, as written (the README's or LOCKRUN_CRON_LINE).
fn tested_line(block: &str, line: Option<&str>) -> String {
    line.map(str::to_string).unwrap_or_else(|| {
        block
            .lines()
            .find(|l| l.starts_with("* "))
            .unwrap_or("?")
            .to_string()
    })
}

#[test]
fn cron_readme_line_runs_once_per_tick() {
    let tools = preflight();
    let minutes: i64 = std::env::var("LOCKRUN_CRON_MINUTES")
        .map(|m| {
            m.parse()
                .ok()
                .filter(|m| *m >= 1)
                .unwrap_or_else(|| panic!("LOCKRUN_CRON_MINUTES={m}: a number of minutes, >= 1"))
        })
        .unwrap_or(3);
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
        .expect("README.md");
    let block = readme_crontab_block(&readme).unwrap_or_else(|e| panic!("{e}"));
    let line = std::env::var("LOCKRUN_CRON_LINE").ok();
    let redis = Server::start_tcp();
    let url = redis.url();
    let setups: Vec<Setup> = CONFIGS
        .iter()
        .map(|c| setup(c, &block, line.as_deref(), &url))
        .collect();

    // The first tick is at least 12 s after the last daemon starts: the +5 s daemon fires 4 s
    // before the real minute and must be running well before. Stopping 20 s after the last
    // tick leaves its jobs (7 s, after fires up to 7 s late) time to end, and comes long
    // before the next tick's first fire (4 s before the next minute).
    let start = now().ceil() + 1.0;
    let first = ((start + 1.0 + 12.0) / 60.0).ceil() as i64;
    let sched = Schedule {
        start,
        ready_by: start + 6.0,
        ticks: (first..first + minutes).collect(),
        stop_at: ((first + minutes - 1) * 60) as f64 + 20.0,
    };
    eprintln!(
        "cron test: {} configurations of 3 daemons from {:.0}, ticks {} to {}, stopping at {:.0} \
         ({:.0} s from now); line: {}",
        CONFIGS.len(),
        sched.start,
        hhmm(first),
        hhmm(first + minutes - 1),
        sched.stop_at,
        sched.stop_at - now(),
        tested_line(&block, line.as_deref())
    );
    let outcomes: Vec<Outcome> = thread::scope(|s| {
        let handles: Vec<_> = setups
            .iter()
            .enumerate()
            .map(|(i, setup)| {
                let (sched, tools, url) = (&sched, &tools, &url);
                s.spawn(move || run(setup, i, sched, tools, url))
            })
            .collect();
        handles
            .into_iter()
            .zip(&setups)
            .map(|(h, setup)| {
                h.join().unwrap_or_else(|e| {
                    let why = e
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_default();
                    Outcome {
                        row: Row {
                            configuration: setup.config.label.to_string(),
                            minutes: 0,
                            histogram: BTreeMap::new(),
                            mails: "?".into(),
                        },
                        problems: vec![format!("the configuration's thread panicked: {why}")],
                        fires: String::new(),
                        timeline: String::new(),
                    }
                })
            })
            .collect()
    });

    let version = std::process::Command::new("dpkg-query")
        .args(["-W", "-f", "${Version}", "cron"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| format!(" {}", stdout_of(&o)))
        .unwrap_or_default();
    let caption = format!(
        "Real Debian cron{version} daemons, three per configuration (each its own hostname, spool \
         and namespaces, started 0.05 / 0.45 / 0.85 s past a second), all configurations at once \
         against one Redis; crontab line `{}`. Runs per minute as `{{runs: minutes}}`.",
        tested_line(&block, line.as_deref())
    );
    let rows: Vec<Row> = outcomes.iter().map(|o| o.row.clone()).collect();
    let report = table(&caption, &rows);
    eprintln!("\n{report}");
    for (c, o) in CONFIGS.iter().zip(&outcomes) {
        eprintln!(
            "{}: median fire time by host, s after the real minute: {}",
            c.name, o.fires
        );
        if std::env::var_os("LOCKRUN_CRON_VERBOSE").is_some() {
            eprint!("{}", o.timeline);
        }
    }
    if let Ok(path) = std::env::var("LOCKRUN_CRON_REPORT") {
        std::fs::write(&path, &report)
            .unwrap_or_else(|e| panic!("LOCKRUN_CRON_REPORT={path}: {e}"));
    }
    let failed: Vec<String> = CONFIGS
        .iter()
        .zip(&outcomes)
        .filter(|(_, o)| !o.problems.is_empty())
        .map(|(c, o)| format!("== {} ({}):\n{}", c.name, c.key, o.problems.join("\n")))
        .collect();
    assert!(
        failed.is_empty(),
        "the cron test found problems (a duplicate run: the line's hold does not cover hosts \
         firing apart; a missing fire or a daemon that exited: see its stderr):\n{}",
        failed.join("\n\n")
    );
    drop(redis);
}

// ---------------------------------------------------------------------------------------------
// The harness's pure parts.

#[test]
fn cron_unit_readme_block() {
    let readme =
        "# x\n```cron\nnot this\n```\n## Crontab\n\ntext\n\n```sh\nno\n```\n```cron\n# c\n\
                  * * * * * lockrun k -- j\n```\n```cron\nnor this\n```\n## Next\n";
    assert_eq!(
        readme_crontab_block(readme).unwrap(),
        "# c\n* * * * * lockrun k -- j\n"
    );
    assert!(readme_crontab_block("## Crontab\ntext\n## Next\n```cron\nx\n```\n").is_err());
    assert!(readme_crontab_block("# Crontab\n```cron\nx\n```\n").is_err());
    assert!(readme_crontab_block("## Crontab\n```cron\nx\n").is_err());
    // The real README has one, running lockrun on the documented key and job.
    let real =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let block = readme_crontab_block(&real).unwrap();
    assert!(
        block.contains("lockrun") && block.contains(README_KEY) && block.contains(README_JOB),
        "{block}"
    );
}

fn spec<'a>(line: Option<&'a str>, extra: &'a [String]) -> CrontabSpec<'a> {
    CrontabSpec {
        url: "redis://127.0.0.1:23456",
        key: "cron-k",
        job: Path::new("/tmp/t/job.sh"),
        lockrun: Path::new("/w/target/debug/lockrun"),
        line,
        control: false,
        extra,
    }
}

/// The lines of a crontab that are not comments.
fn active(tab: &str) -> Vec<&str> {
    tab.lines().filter(|l| !l.starts_with('#')).collect()
}

#[test]
fn cron_unit_crontab_from_block() {
    let future = "# Every host has this line.\nLOCKRUN_REDIS_URL=redis://redis.internal:6379\n\
                  * * * * * lockrun -q -E 0 --every 1m nightly-report -- /usr/local/bin/report.sh\n";
    let tab = build_crontab(future, &spec(None, &[])).unwrap();
    assert_eq!(
        active(&tab),
        [
            "PATH=/w/target/debug:/usr/bin:/bin",
            "LOCKRUN_HISTORY=10000",
            "LOCKRUN_REDIS_URL=redis://127.0.0.1:23456",
            "* * * * * lockrun -q -E 0 --every 1m cron-k -- /tmp/t/job.sh",
        ]
    );
    assert!(tab.contains("# Every host has this line.") && tab.ends_with('\n'));
    let extra = ["x y".to_string()];
    let control = CrontabSpec {
        control: true,
        ..spec(None, &extra)
    };
    let control = build_crontab(future, &control).unwrap();
    assert_eq!(
        active(&control)[3..],
        ["* * * * * lockrun -q -E 0 cron-k -- /tmp/t/job.sh", "x y"]
    );
    // No URL in the block: one is added before the schedule; the override replaces the line.
    let now = "* * * * * lockrun -q -E 0 nightly-report -- /usr/local/bin/report.sh\n";
    let held =
        "* * * * * lockrun -q -E 0 --min-hold 54s nightly-report -- /usr/local/bin/report.sh";
    let tab = build_crontab(now, &spec(Some(held), &[])).unwrap();
    assert_eq!(
        active(&tab),
        [
            "PATH=/w/target/debug:/usr/bin:/bin",
            "LOCKRUN_REDIS_URL=redis://127.0.0.1:23456",
            "LOCKRUN_HISTORY=10000",
            "* * * * * lockrun -q -E 0 --min-hold 54s cron-k -- /tmp/t/job.sh",
        ]
    );
    // A URL given with -r or --redis=, and an absolute lockrun path.
    let r =
        "* * * * * /usr/bin/lockrun -r redis://h:1 nightly-report -- /usr/local/bin/report.sh\n";
    assert_eq!(
        active(&build_crontab(r, &spec(None, &[])).unwrap())[2],
        "* * * * * lockrun -r redis://127.0.0.1:23456 cron-k -- /tmp/t/job.sh"
    );
    let r = "* * * * * lockrun --redis=redis://h:1 nightly-report -- /usr/local/bin/report.sh\n";
    assert!(active(&build_crontab(r, &spec(None, &[])).unwrap())[2]
        .contains(" --redis=redis://127.0.0.1:23456 "));
    // What the harness cannot test says so.
    for bad in [
        "*/5 * * * * lockrun nightly-report -- /usr/local/bin/report.sh\n",
        "* * * * * lockrun other -- /usr/local/bin/report.sh\n",
        "* * * * * lockrun nightly-report -- /opt/job\n",
        "* * * * * lockrun nightly-report -- /usr/local/bin/report.sh\n* * * * * lockrun b\n",
        "# nothing\n",
    ] {
        assert!(build_crontab(bad, &spec(None, &[])).is_err(), "{bad}");
    }
    assert!(
        build_crontab(
            now,
            &CrontabSpec {
                control: true,
                ..spec(None, &[])
            }
        )
        .is_err(),
        "a control without a hold"
    );
}

#[test]
fn cron_unit_without_hold() {
    assert_eq!(
        without_hold("* * * * * lockrun -q --every 1m k -- j --every 2").as_deref(),
        Some("* * * * * lockrun -q k -- j --every 2")
    );
    assert_eq!(
        without_hold("* * * * * lockrun --min-hold=54s -E 0 k -- j").as_deref(),
        Some("* * * * * lockrun -E 0 k -- j")
    );
    assert_eq!(without_hold("* * * * * lockrun k -- j --min-hold 5"), None);
}

#[test]
fn cron_unit_ticks_with_skew() {
    // The minute 12:30 (tick 750): a +5 s host fires at 12:29:56, a synced one at 12:30:01, a
    // -5 s one at 12:30:06, each plus its fraction of a second; all belong to 12:30.
    let m = 750.0 * 60.0;
    for t in [m - 3.95, m + 1.45, m + 6.85, m - 29.9, m + 29.9] {
        assert_eq!(tick_of(t), 750, "{t}");
    }
    assert_eq!(tick_of(m + 30.1), 751);
    assert_eq!(tick_of(m - 30.1), 749);
    assert_eq!(hhmm(750), "12:30");
    let run = |host: &str, start: f64| JobRun {
        host: host.into(),
        start,
        end: start + 0.3,
    };
    let ticks: BTreeSet<i64> = (750..754).collect();
    let runs = [
        run("host1", m - 3.9),
        run("host2", m + 61.4),
        run("host3", m + 66.8),
        run("host1", m + 116.1),
        run("host1", m - 61.0), // before the window: the partial first tick
    ];
    // 12:30 one run, 12:31 two, 12:32 one, 12:33 none.
    assert_eq!(
        histogram(&runs, &ticks),
        BTreeMap::from([(0, 1), (1, 2), (2, 1)])
    );
}

#[test]
fn cron_unit_job_log_and_history() {
    let runs = parse_job_log("host1 1800.050 1800.360\nhost2 1861.450 1868.470\n").unwrap();
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[1].host, "host2");
    assert!(parse_job_log("host1 1800.05\n").is_err());
    assert!(parse_job_log("host1 x 1\n").is_err());
    let json = r#"[{"duration_ms":0,"exit_code":null,"fence":null,"host":"host3","outcome":"skipped","pid":9,"time":"t","time_ms":1861900},
                  {"duration_ms":7030,"exit_code":0,"fence":1,"host":"host2","outcome":"ran","pid":8,"time":"t","time_ms":1868480},
                  {"duration_ms":320,"exit_code":0,"fence":1,"host":"host1","outcome":"ran","pid":7,"time":"t","time_ms":1800365}]"#;
    let history = parse_history(json).unwrap();
    assert_eq!(history.len(), 3);
    assert_eq!(history[1].start(), 1861.45);
    assert_eq!(match_history(&runs, &history), Vec::<String>::new());
    // A run the history lacks, and one it has on another host.
    let p = match_history(&runs, &history[..2]);
    assert!(
        p.iter().any(|p| p.contains("host1 1800.050 has no `ran`")),
        "{p:?}"
    );
    let mut other = history.clone();
    other[2].host = "host9".into();
    let p = match_history(&runs, &other);
    assert!(
        p.iter().any(|p| p.contains("history has a run on host9")),
        "{p:?}"
    );
    assert!(
        p.iter().any(|p| p.contains("host1 1800.050 has no")),
        "{p:?}"
    );
    // Starts further apart than MATCH_SECS do not match.
    let mut late = history.clone();
    late[2].time_ms += 2500;
    assert_eq!(match_history(&runs, &late).len(), 2);
    // Any outcome but ran and skipped, and a run that failed, are reported.
    let mut lost = history.clone();
    lost[0].outcome = "lost".into();
    lost[1].exit_code = Some(1);
    let p = match_history(&runs, &lost);
    assert!(p.iter().any(|p| p.contains("\"lost\"")), "{p:?}");
    assert!(p.iter().any(|p| p.contains("exit code Some(1)")), "{p:?}");
    assert!(parse_history("{}").is_err());
}
