//! `--standby` on real cron daemons: the guide's standby line ("Standby hosts: a tick survives
//! the host that took it") on three hosts under one key, as `cron.rs` runs the README's line
//! (the same harness, `support::cron`: Debian's `cron` and busybox `crond`, each host a daemon in
//! its own mount, UTS and PID namespace, lockrun where one install channel puts it), and here
//! also each host in its own network namespace (`support::netns`), Redis on a host of its own.
//! Two configurations of three hosts run at once, each with its own key.
//!
//! The job takes about 20 s (20 steps of `sleep 1`) and logs its start, each step and its end
//! with its host, `LOCKRUN_FENCE` and the time. Each minute, about 5 s into the job, the test
//! does one thing to the host that took the tick, in rotation: kills it (SIGKILL to lockrun and
//! its job's group), kills its lockrun alone (SIGKILL, mid-`sleep`: the job's shell gets
//! SIGTERM from the parent-death signal, the `sleep` it leaves in the job's group lives up to a
//! second more, and the key stays until its TTL), freezes it (SIGSTOP to every process of its
//! PID namespace: daemon, lockrun, job; SIGCONT TTL + 10 s later), kills its job alone (SIGKILL
//! to the group), cuts it off from Redis (iptables, lifted TTL + 10 s later), stops lockrun
//! (SIGTERM), or nothing. Every tick must complete exactly once (one run reaching its end), on
//! another host when a fault was injected, with fences only increasing; no two hosts' jobs may
//! be live at once, where a stopped (frozen) process is not live and an orphaned one of the
//! job's group is; a frozen job, thawed, must be stopped by its lockrun before its end, and the
//! time it lived after the thaw is reported (that overlap is the one the safety page says fences
//! are for); cron's mail and busybox crond's output of a tick carry nothing but the takeover's
//! WARN line, and the faulted host's own lines. The time from the fault to the takeover's job
//! start is measured against the TTL, and MONITOR counts what each host asks of Redis on a
//! healthy tick.
//!
//! `LOCKRUN_CRON_MINUTES` sets the ticks observed per configuration (default 4: the seven kinds
//! at least once between the two), `LOCKRUN_CRON_STANDBY_REPORT=<file>` writes the results
//! table there:
//!
//! `LOCKRUN_CRON_MINUTES=30 LOCKRUN_CRON_STANDBY_REPORT=standby.md cargo test --test lockrun cron_standby -- --nocapture`
//!
//! Root only (mounts and namespaces); `bash tests/ensure-cron.sh` and `bash
//! tests/ensure-netns.sh` install what it needs. The harness (running the configurations,
//! injecting the faults, the checks, the table) is `support::cron_standby`.

use crate::support::cron::*;
use crate::support::cron_standby::*;
use crate::support::netns::Net;
use crate::support::redis_monitor::{parse_monitor, RedisMonitor};
use std::collections::BTreeSet;
use std::path::Path;
use Channel::{Cargo, UsrBin, UsrLocalBin};

/// Redis, on a host of the network (its own namespace: no clash with anything on the machine).
const PORT: u16 = 27500;

/// The host that fires first takes each tick (busybox crond fires at :00, Debian's cron at
/// :01): in the first configuration a busybox host, in the second a Debian host whose clock runs
/// 3 s ahead (it fires at the real :58), so the faults meet both daemons.
const CONFIGS: [Config; 2] = [
    Config {
        label: "busybox takes the ticks",
        key: "cron-standby-a",
        hosts: [
            Host {
                name: "a1",
                daemon: Daemon::Busybox { ash: true },
                channel: UsrLocalBin,
                skew: 0,
            },
            Host {
                name: "a2",
                daemon: Daemon::Debian,
                channel: UsrBin,
                skew: 0,
            },
            Host {
                name: "a3",
                daemon: Daemon::Debian,
                channel: Cargo,
                skew: 0,
            },
        ],
        offset: 0,
    },
    Config {
        label: "Debian cron (+3 s) takes the ticks",
        key: "cron-standby-b",
        hosts: [
            Host {
                name: "b1",
                daemon: Daemon::Debian,
                channel: UsrLocalBin,
                skew: 3,
            },
            Host {
                name: "b2",
                daemon: Daemon::Busybox { ash: false },
                channel: Cargo,
                skew: 0,
            },
            Host {
                name: "b3",
                daemon: Daemon::Debian,
                channel: UsrBin,
                skew: 0,
            },
        ],
        offset: 4,
    },
];

/// The ticks observed per configuration unless `LOCKRUN_CRON_MINUTES` says otherwise: with the
/// second configuration's offset, each fault of [`ROTATION`] at least once between the two.
const DEFAULT_MINUTES: usize = 4;

#[test]
fn cron_standby_ticks_survive_their_hosts() {
    let tools = preflight();
    let minutes: i64 = std::env::var("LOCKRUN_CRON_MINUTES")
        .map(|m| {
            m.parse()
                .ok()
                .filter(|m| *m >= 1)
                .unwrap_or_else(|| panic!("LOCKRUN_CRON_MINUTES={m}: a number of minutes, >= 1"))
        })
        .unwrap_or(DEFAULT_MINUTES as i64);
    let heading = "### Standby hosts: a tick survives the host that took it";
    let guide =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/guide.md"))
            .expect("docs/guide.md");
    let block = crontab_block(&guide, "docs/guide.md", heading).unwrap_or_else(|e| panic!("{e}"));
    let line = block
        .lines()
        .find(|l| l.starts_with("* "))
        .unwrap_or("?")
        .to_string();
    assert!(
        line.contains(" --standby ") && line.contains(" --every 1m "),
        "the guide's standby line has no --standby or --every 1m: {line}"
    );
    let mut names: Vec<&str> = CONFIGS
        .iter()
        .flat_map(|c| c.hosts.map(|h| h.name))
        .collect();
    names.push("redis");
    let net = Net::new(&names);
    let redis = net.redis("redis", PORT, "");
    let url = format!("redis://{}", redis.addr());
    let setups: Vec<Setup> = CONFIGS.iter().map(|c| setup(c, &block, &url)).collect();
    let monitor = RedisMonitor::start(&redis.socket);

    let sched = Schedule::new(minutes);
    eprintln!(
        "cron standby test: {} configurations of 3 daemons, ticks {} to {}, stopping at {:.0} \
         ({:.0} s from now); line: {line}, with --ttl {TTL}",
        CONFIGS.len(),
        hhmm(sched.ticks[0]),
        hhmm(sched.ticks[sched.ticks.len() - 1]),
        sched.stop_at,
        sched.stop_at - now(),
    );
    let observed = run_all(&setups, &sched, &tools, &net, &redis.socket);
    let seen = monitor.stop();
    let checked: Vec<Checked> = setups
        .iter()
        .zip(observed)
        .map(|(setup, o)| check(setup, &sched, o, &seen, &net))
        .collect();

    let report = report(&CONFIGS, &checked, &tools.busybox_version, &line);
    eprintln!("\n{report}");
    if let Ok(path) = std::env::var("LOCKRUN_CRON_STANDBY_REPORT") {
        std::fs::write(&path, &report)
            .unwrap_or_else(|e| panic!("LOCKRUN_CRON_STANDBY_REPORT={path}: {e}"));
    }
    let failed: Vec<String> = CONFIGS
        .iter()
        .zip(&checked)
        .filter(|(_, c)| !c.problems.is_empty())
        .map(|(cfg, c)| format!("== {} ({}):\n{}", cfg.label, cfg.key, c.problems.join("\n")))
        .collect();
    assert!(
        failed.is_empty(),
        "the standby cron test found problems:\n{}",
        failed.join("\n\n")
    );
    drop(redis);
}

// ---------------------------------------------------------------------------------------------
// The harness's pure parts.

#[test]
fn cron_standby_unit_job_log() {
    let log = "start a1 10 100.0\nstep a1 10 101.0\nstart a2 12 111.0\nstep a2 12 112.0\n\
               end a2 12 131.0\n";
    let runs = parse_runs(log).unwrap();
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0].steps, [101.0]);
    assert_eq!(runs[0].end, None);
    assert_eq!(runs[1].end, Some(131.0));
    for bad in [
        "step a1 10 1.0\n",
        "start a1 x 1\n",
        "start a1 1 1\nstart a1 1 2\n",
        "x\n",
    ] {
        assert!(parse_runs(bad).is_err(), "{bad}");
    }
}

#[test]
fn cron_standby_unit_times() {
    // 12:30 is tick 750: from 12:29:55 to 12:30:55.
    let m = 750.0 * 60.0;
    for t in [m - 5.0, m - 2.0, m + 54.9] {
        assert_eq!(tick_at(t), 750, "{t}");
    }
    assert_eq!(tick_at(m - 5.1), 749);
    assert_eq!(tick_at(m + 55.0), 751);
    assert_eq!(
        line_time("2026-11-27T12:32:00.837489Z  WARN x key=y"),
        Some(1795782720.837489)
    );
    assert_eq!(line_time("1970-01-01T00:00:01Z x"), Some(1.0));
    assert_eq!(line_time("Killed"), None);
    assert_eq!(
        gist("2026-11-27T12:32:00.837489Z  WARN the host did not; here key=k holder=\"h\""),
        "WARN the host did not; here"
    );
    assert_eq!(overlap((0.0, 10.0), (5.0, 20.0)), 5.0);
    assert_eq!(overlap((0.0, 10.0), (10.0, 20.0)), 0.0);
    // Frozen from 5 to 15: live 0–5 and 15–16.
    assert_eq!(
        live(0.0, 16.0, Some((5.0, 15.0))),
        [(0.0, 5.0), (15.0, 16.0)]
    );
    assert_eq!(live(0.0, 4.0, Some((5.0, 15.0))), [(0.0, 4.0)]);
}

#[test]
fn cron_standby_unit_rotation() {
    // Every fault once in the rotation, and at the default scale in one configuration or the
    // other; never the same fault in both configurations in the same minute.
    let kinds: BTreeSet<Fault> = ROTATION.iter().copied().collect();
    assert_eq!(kinds.len(), ROTATION.len());
    let seen: BTreeSet<Fault> = CONFIGS
        .iter()
        .flat_map(|c| (0..DEFAULT_MINUTES).map(move |i| fault_of(c, i)))
        .collect();
    assert_eq!(seen, kinds);
    for i in 0..ROTATION.len() {
        assert_ne!(fault_of(&CONFIGS[0], i), fault_of(&CONFIGS[1], i), "{i}");
    }
}

#[test]
fn cron_standby_unit_monitor_lines() {
    assert_eq!(
        parse_monitor("+1764258000.123456 [0 10.77.0.2:45678] \"EVALSHA\" \"abc\" \"3\""),
        Some((1764258000.123456, "10.77.0.2".into(), "EVALSHA".into()))
    );
    assert_eq!(parse_monitor("+1764258000.1 [0 lua] \"SET\" \"k\""), None);
    assert_eq!(parse_monitor("+OK"), None);
}

#[test]
fn cron_standby_unit_guide_block() {
    let guide =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/guide.md"))
            .unwrap();
    let block = crontab_block(
        &guide,
        "docs/guide.md",
        "### Standby hosts: a tick survives the host that took it",
    )
    .unwrap();
    assert!(
        block.contains("--standby") && block.contains(README_KEY),
        "{block}"
    );
    let c = setup(&CONFIGS[0], &block, "redis://10.77.0.7:27500");
    let line = c.crontab.lines().find(|l| l.starts_with("* ")).unwrap();
    assert!(
        line.contains("-r redis://10.77.0.7:27500 ")
            && line.contains(&format!(" --ttl {TTL} cron-standby-a -- /")),
        "{line}"
    );
    // A section ends at the next heading of its level or above.
    let doc = "## A\n### B\ntext\n### C\n```cron\nx\n```\n";
    assert!(crontab_block(doc, "d", "### B").is_err());
    assert_eq!(crontab_block(doc, "d", "### C").unwrap(), "x\n");
    assert_eq!(crontab_block(doc, "d", "## A").unwrap(), "x\n");
}
