//! The README's crontab line on real cron daemons, Debian's `cron` and busybox `crond` (the cron
//! of Alpine-based images): the same line on three "hosts" (each a daemon in its own mount, UTS
//! and PID namespace, see `support::cron`), one Redis, and each minute exactly one host runs the
//! job while the others skip silently. Each host has lockrun where one install channel of the
//! README puts it (`/usr/local/bin`, `/usr/bin`, `~/.cargo/bin`) and nowhere else, and its
//! daemon's own PATH, so the line must find it. Configurations run at the same time, each with
//! its own key and job log, daemons and channels mixed: synced clocks or clocks 5 s apart
//! (libfaketime), a 0.3 s job or a 7 s one, busybox crond only, and a control, the same line
//! without its hold, which must show a tick run on more than one host (else the harness could
//! not see a duplicate).
//!
//! The crontab is the README's block as written (so the docs are what is tested), with only the
//! test's Redis, key and job in it. `LOCKRUN_CRON_LINE` replaces its schedule line,
//! `LOCKRUN_CRON_MINUTES` sets the minutes observed (default 3; the test takes about that plus
//! 1–2 minutes), and `LOCKRUN_CRON_REPORT=<file>` writes the results table there:
//!
//! `LOCKRUN_CRON_MINUTES=30 LOCKRUN_CRON_REPORT=cron.md cargo test --test lockrun cron_ -- --nocapture`
//!
//! Root only (mounts and namespaces); `bash tests/ensure-cron.sh` installs cron, libfaketime and
//! busybox-static. (libfaketime 0.9.10 hangs redis-server at start, but runs Debian's cron fine:
//! the skew shows in the fire times, which the test checks, so no shim of our own is needed. It
//! cannot skew busybox-static, a static binary: busybox hosts keep the real clock.)

use crate::support::cron::*;
use crate::support::*;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::thread;

/// One host: its daemon, where lockrun is installed, and its clock.
#[derive(Clone, Copy)]
struct Host {
    daemon: Daemon,
    channel: Channel,
    /// The daemon's clock minus the real one, in seconds (Debian's cron only).
    skew: i32,
}

const fn debian(channel: Channel, skew: i32) -> Host {
    Host {
        daemon: Daemon::Debian,
        channel,
        skew,
    }
}

const fn busybox(ash: bool, channel: Channel) -> Host {
    Host {
        daemon: Daemon::Busybox { ash },
        channel,
        skew: 0,
    }
}

use Channel::{Cargo, UsrBin, UsrLocalBin};

/// One set of three hosts under one key.
struct Config {
    name: &'static str,
    /// For the table.
    label: &'static str,
    key: &'static str,
    hosts: [Host; 3],
    /// The job's `sleep`.
    job_secs: &'static str,
    /// The line without its hold: must show duplicates.
    control: bool,
}

/// Every configuration mixes the daemons and the install channels (a fleet of Debian and Alpine
/// hosts, lockrun installed one way or another), so that each daemon meets each channel and each
/// hold is tested against the other daemon's fire times; the skewed ones keep busybox (which
/// libfaketime cannot skew) at the real clock.
const CONFIGS: [Config; 6] = [
    Config {
        name: "synced-fast",
        label: "synced clocks, 0.3 s job",
        key: "cron-synced-fast",
        hosts: [
            debian(UsrLocalBin, 0),
            debian(UsrBin, 0),
            busybox(true, Cargo),
        ],
        job_secs: "0.3",
        control: false,
    },
    Config {
        name: "synced-slow",
        label: "synced clocks, 7 s job",
        key: "cron-synced-slow",
        hosts: [
            busybox(true, UsrLocalBin),
            debian(Cargo, 0),
            debian(UsrBin, 0),
        ],
        job_secs: "7",
        control: false,
    },
    Config {
        name: "skewed-fast",
        label: "clocks +5 s / 0 / −5 s, 0.3 s job",
        key: "cron-skewed-fast",
        hosts: [
            debian(UsrLocalBin, 5),
            busybox(false, UsrBin),
            debian(Cargo, -5),
        ],
        job_secs: "0.3",
        control: false,
    },
    Config {
        name: "skewed-slow",
        label: "clocks +5 s / 0 / −5 s, 7 s job",
        key: "cron-skewed-slow",
        hosts: [
            debian(UsrBin, 5),
            busybox(false, Cargo),
            debian(UsrLocalBin, -5),
        ],
        job_secs: "7",
        control: false,
    },
    Config {
        name: "busybox",
        label: "busybox crond only, synced clocks, 0.3 s job",
        key: "cron-busybox",
        hosts: [
            busybox(true, UsrLocalBin),
            busybox(true, UsrBin),
            busybox(true, Cargo),
        ],
        job_secs: "0.3",
        control: false,
    },
    Config {
        name: "control",
        label: "control: the line without its hold, synced clocks, 0.3 s job",
        key: "cron-control",
        hosts: [
            debian(UsrLocalBin, 0),
            busybox(true, UsrLocalBin),
            debian(Cargo, 0),
        ],
        job_secs: "0.3",
        control: true,
    },
];

/// Where in a second each configuration's three daemons start. Both daemons sleep whole seconds
/// and fire at their second of the minute (Debian's :01, busybox's :00) plus the fraction of a
/// second they started at, so these spread the hosts' fires over 0.8 s, as on real hosts (synced
/// clocks never fire together). For Debian's cron only at first: when a job ends, the SIGCHLD
/// interrupts its sleep, which it resumes in whole seconds from that moment, so from then on it
/// fires at the fraction its last job ended at (seen here: the host that ran a 0.3 s job fires
/// 0.3 s later the next minute; a 7 s job or a skip moves it by a few ms). busybox crond reaps
/// its jobs only when it wakes (every 10 s while one runs), so its fraction stays.
const FRACTIONS: [f64; 3] = [0.05, 0.45, 0.85];

/// The control's mail capture check: one job of each daemon prints this once, so each daemon's
/// way of passing on a job's output must deliver it (Debian's cron mails it through the
/// recorder; busybox crond, with no MAILTO, writes it to its log); a "no mail" result means
/// nothing otherwise.
const MAIL_CHECK: &str = "lockrun-cron-mail-capture-check";

/// A fire belongs to its daemon when lockrun started this far after the daemon's second of the
/// minute ([`Daemon::fire_second`]) by its clock (`offset + skew`): within that second (at a
/// fraction that wanders, see [`FRACTIONS`]), plus lockrun starting on a loaded machine. The
/// test's skews are 5 s apart, so a daemon whose clock is not skewed as asked stands out.
const FIRE_WINDOW: (f64, f64) = (-0.5, 3.0);

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
        // mkdir succeeds once per host: each daemon prints once.
        vec![format!(
            "* * * * * mkdir '{}'-$(uname -n) 2>/dev/null && echo {MAIL_CHECK} from $(uname -n)",
            dir.path().join("mail-check").display()
        )]
    } else {
        Vec::new()
    };
    let spec = CrontabSpec {
        url,
        key: config.key,
        job: &job,
        line,
        control: config.control,
        extra: &extra,
        options: &[],
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
    let (daemons, history, problems) = run_daemons(setup, index, sched, tools, url);
    check(setup, sched, &daemons, history, problems)
}

/// What the check needs to know of a host once its daemon is gone.
struct HostSeen {
    host: String,
    daemon: Daemon,
    skew: i32,
    /// What the daemon printed that is not its own log (busybox crond: its jobs' output).
    output: Vec<String>,
}

/// Starts the three daemons at their fractions of a second, keeps them until `stop_at`, and
/// stops them once their jobs have ended. Returns what each host was and printed, the key's
/// history, and what went wrong.
fn run_daemons(
    setup: &Setup,
    index: usize,
    sched: &Schedule,
    tools: &Tools,
    url: &str,
) -> (Vec<HostSeen>, HistoryLog, Vec<String>) {
    let c = setup.config;
    let mut problems = Vec::new();
    let mut daemons = Vec::new();
    for (k, (frac, h)) in FRACTIONS.iter().zip(c.hosts).enumerate() {
        // The configurations' daemons a little apart, not all forked at the same instant.
        sleep_until(sched.start + frac + 0.02 * index as f64);
        daemons.push(CronDaemon::start(&DaemonSpec {
            dir: setup.dir.path().join(format!("host{}", k + 1)),
            host: format!("host{}", k + 1),
            daemon: h.daemon,
            channel: h.channel,
            crontab: &setup.crontab,
            sendmail_layer: &setup.layer,
            skew_s: h.skew,
            tools,
            netns: None,
        }));
    }
    for d in daemons.iter_mut() {
        if let Err(e) = d.wait_ready(sched.ready_by) {
            problems.push(e);
        }
    }
    // Waiting out the ticks; a daemon that dies on the way is a failure (its ticks then look
    // fine, one host fewer proving nothing). The history is read half a minute after each tick,
    // when every host has fired and the next tick is far.
    let mut history = HistoryLog::default();
    let mut reads: Vec<f64> = sched.ticks.iter().map(|t| (t * 60) as f64 + 30.0).collect();
    while now() < sched.stop_at {
        sleep_until((now() + 5.0).min(sched.stop_at));
        if reads.first().is_some_and(|t| now() >= *t) {
            reads.remove(0);
            history.read(c.key, url);
        }
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
    history.read(c.key, url);
    let seen = daemons
        .iter()
        .map(|d| HostSeen {
            host: d.host.clone(),
            daemon: d.daemon,
            skew: d.skew_s,
            output: d.output(),
        })
        .collect();
    (seen, history, problems)
}

/// Checks a configuration's job log, `lockrun history` and mail; adds to `problems`.
fn check(
    setup: &Setup,
    sched: &Schedule,
    hosts: &[HostSeen],
    history: HistoryLog,
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
    problems.extend(history.problems.iter().cloned());
    let history = history.entries();
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
        for h in hosts {
            let (host, skew) = (h.host.as_str(), h.skew);
            let offsets = fired.get(&(*tick, host)).cloned().unwrap_or_default();
            if offsets.len() != 1 {
                problems.push(format!(
                    "tick {}: {host} ({}) fired {} times by lockrun's history (once expected)",
                    hhmm(*tick),
                    h.daemon.label(),
                    offsets.len()
                ));
            }
            for off in &offsets {
                let own = off + skew as f64 - h.daemon.fire_second();
                if own < FIRE_WINDOW.0 || own > FIRE_WINDOW.1 {
                    problems.push(format!(
                        "tick {}: {host} ({}, clock {skew:+} s) fired {off:+.3} s after the real \
                         minute, {:+.3} s by its own clock: not its skew (expected {:+} to {:+} s \
                         by its clock)",
                        hhmm(*tick),
                        h.daemon.label(),
                        off + skew as f64,
                        h.daemon.fire_second() + FIRE_WINDOW.0,
                        h.daemon.fire_second() + FIRE_WINDOW.1
                    ));
                }
            }
            by_host.entry(host).or_default().extend(offsets);
        }
    }
    let fires = hosts
        .iter()
        .map(|h| {
            let offs = by_host.get_mut(h.host.as_str()).unwrap();
            offs.sort_by(f64::total_cmp);
            let median = offs.get(offs.len() / 2).copied().unwrap_or(f64::NAN);
            format!(
                "{} ({}, {:+} s) {median:+.2} s",
                h.host,
                h.daemon.label(),
                h.skew
            )
        })
        .collect::<Vec<_>>()
        .join(", ");

    // Mail, and busybox crond's output (where its jobs' output goes without MAILTO): none,
    // except the control's capture check, once from each host.
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
    let mut output_lines = 0;
    let mut captured = 0;
    for h in hosts {
        let (printed, other): (Vec<&String>, Vec<&String>) =
            h.output.iter().partition(|l| l.contains(MAIL_CHECK));
        output_lines += other.len();
        if !other.is_empty() {
            problems.push(format!(
                "{} ({}) printed {} line(s) (a job's output, or the daemon's error):\n{}",
                h.host,
                h.daemon.label(),
                other.len(),
                other.iter().map(|l| format!("  {l}\n")).collect::<String>()
            ));
        }
        if c.control {
            let from = format!("{MAIL_CHECK} from {}", h.host);
            let n = match h.daemon {
                Daemon::Debian => checks.iter().filter(|m| m.contains(&from)).count(),
                Daemon::Busybox { .. } => printed.iter().filter(|l| l.contains(&from)).count(),
            };
            captured += n;
            if n != 1 {
                let way = match h.daemon {
                    Daemon::Debian => "mails through the recorder at /usr/sbin/sendmail",
                    Daemon::Busybox { .. } => "lines in busybox crond's log (its stdout)",
                };
                problems.push(format!(
                    "the output capture check: {n} {way} with {from:?} (one expected): this \
                     daemon's output is not caught, so \"no mail\" proves nothing"
                ));
            }
        }
    }
    if !problems.is_empty() {
        problems.push(format!(
            "lockrun history by tick:\n{timeline}the job log:\n{text}"
        ));
    }
    let messages = others.len() + output_lines;
    Outcome {
        row: Row {
            configuration: c.label.to_string(),
            hosts: hosts_label(&c.hosts),
            minutes: sched.ticks.len(),
            histogram: hist,
            mails: if c.control {
                format!("{messages} (+{captured} capture checks)")
            } else {
                messages.to_string()
            },
        },
        problems,
        fires,
        timeline,
    }
}

/// The hosts of a configuration, for the table: daemon and where lockrun is.
fn hosts_label(hosts: &[Host]) -> String {
    hosts
        .iter()
        .map(|h| format!("{}, {}", h.daemon.label(), h.channel.label()))
        .collect::<Vec<_>>()
        .join("; ")
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
                            hosts: hosts_label(&setup.config.hosts),
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
        "Real cron daemons, Debian cron{version} and busybox crond ({}), three per configuration \
         (each its own hostname, spool and namespaces, lockrun where one install channel puts it, \
         started 0.05 / 0.45 / 0.85 s past a second), all configurations at once against one \
         Redis; crontab line `{}`. Runs per minute as `{{runs: minutes}}`; mails: what Debian's \
         cron mailed and the lines busybox crond's jobs printed (it mails nothing without \
         MAILTO).",
        tools.busybox_version,
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
        line,
        control: false,
        extra,
        options: &[],
    }
}

/// The lines of a crontab that are not comments.
fn active(tab: &str) -> Vec<&str> {
    tab.lines().filter(|l| !l.starts_with('#')).collect()
}

#[test]
fn cron_unit_crontab_from_block() {
    // The block as it is, with the test's URL, key and job: nothing added.
    let block =
        "# Every host has this line.\n* * * * * PATH=\"/usr/local/bin:$HOME/.cargo/bin:$PATH\" \
                 lockrun -r redis://redis.internal:6379 -q -E 0 --every 1m nightly-report -- \
                 /usr/local/bin/report.sh\n";
    let tab = build_crontab(block, &spec(None, &[])).unwrap();
    assert_eq!(
        tab,
        "# Every host has this line.\n* * * * * PATH=\"/usr/local/bin:$HOME/.cargo/bin:$PATH\" \
         lockrun -r redis://127.0.0.1:23456 -q -E 0 --every 1m cron-k -- /tmp/t/job.sh\n"
    );
    let extra = ["x y".to_string()];
    let control = CrontabSpec {
        control: true,
        ..spec(None, &extra)
    };
    let control = build_crontab(block, &control).unwrap();
    assert_eq!(
        active(&control),
        [
            "* * * * * PATH=\"/usr/local/bin:$HOME/.cargo/bin:$PATH\" lockrun -r \
             redis://127.0.0.1:23456 -q -E 0 cron-k -- /tmp/t/job.sh",
            "x y"
        ]
    );
    // A URL in an environment line is replaced there (and kept there: a daemon that ignores
    // such lines fails the test, as it fails users); other lines stay as they are.
    let env = "LOCKRUN_REDIS_URL=redis://redis.internal:6379\nMAILTO=ops\n\
               * * * * * lockrun -q -E 0 --every 1m nightly-report -- /usr/local/bin/report.sh\n";
    assert_eq!(
        active(&build_crontab(env, &spec(None, &[])).unwrap()),
        [
            "LOCKRUN_REDIS_URL=redis://127.0.0.1:23456",
            "MAILTO=ops",
            "* * * * * lockrun -q -E 0 --every 1m cron-k -- /tmp/t/job.sh",
        ]
    );
    // The override replaces the line.
    let held = "* * * * * lockrun -r redis://h:1 -q -E 0 --min-hold 54s nightly-report -- \
                /usr/local/bin/report.sh";
    assert_eq!(
        active(&build_crontab(block, &spec(Some(held), &[])).unwrap()),
        ["* * * * * lockrun -r redis://127.0.0.1:23456 -q -E 0 --min-hold 54s cron-k -- /tmp/t/job.sh"]
    );
    // --redis=, and an absolute lockrun path (kept: it is where the line looks).
    let r =
        "* * * * * /usr/bin/lockrun --redis=redis://h:1 nightly-report -- /usr/local/bin/report.sh\n";
    assert_eq!(
        active(&build_crontab(r, &spec(None, &[])).unwrap()),
        ["* * * * * /usr/bin/lockrun --redis=redis://127.0.0.1:23456 cron-k -- /tmp/t/job.sh"]
    );
    // What the harness cannot test says so.
    for bad in [
        "*/5 * * * * lockrun -r redis://h:1 nightly-report -- /usr/local/bin/report.sh\n",
        "* * * * * lockrun -r redis://h:1 other -- /usr/local/bin/report.sh\n",
        "* * * * * lockrun -r redis://h:1 nightly-report -- /opt/job\n",
        "* * * * * lockrun -r redis://h:1 nightly-report -- /usr/local/bin/report.sh\n* * * * * lockrun b\n",
        "* * * * * X=1 env lockrun -r redis://h:1 nightly-report -- /usr/local/bin/report.sh\n",
        // No Redis named: each host would lock its own.
        "* * * * * lockrun -q -E 0 --every 1m nightly-report -- /usr/local/bin/report.sh\n",
        "# nothing\n",
    ] {
        assert!(build_crontab(bad, &spec(None, &[])).is_err(), "{bad}");
    }
    let no_hold = "* * * * * lockrun -r redis://h:1 nightly-report -- /usr/local/bin/report.sh\n";
    assert!(
        build_crontab(
            no_hold,
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
fn cron_unit_busybox_log_lines() {
    // What busybox crond 1.35 logs of its own at its default level, and what it does not.
    assert!(is_busybox_log_line(
        "crond: crond (busybox 1.35.0) started, log level 8"
    ));
    assert!(is_busybox_log_line(
        "crond: USER root pid  15 cmd PATH=\"/usr/local/bin:$PATH\" lockrun -q k -- j"
    ));
    for output in [
        "/bin/sh: 1: lockrun: not found",
        "2026-11-27T12:32:00.837489Z ERROR Redis at redis://127.0.0.1:6379 unavailable",
        "crond: can't change directory to '/root'",
        "",
    ] {
        assert!(!is_busybox_log_line(output), "{output}");
    }
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
