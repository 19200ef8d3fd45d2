//! What every kind of block runs against: the test's servers (started as blocks need them),
//! each block's scratch directory with its stand-in jobs, and the mapping of what a block names
//! on the reader's machines to what it becomes here.

use super::STAND_INS;
use crate::support::monitor::Monitor;
use crate::support::{lockrun_bin, Server};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Output;

/// The servers and files the examples run against.
pub(super) struct Fixture {
    pub(super) main: Server,
    /// Three independent masters, for the Redlock examples.
    pub(super) redlock: Option<Vec<Server>>,
    /// A server that requires a password, for the examples that read a password file.
    pub(super) password: Option<Server>,
    /// Input for the filter blocks, made once: (all stderr lines, text errors, JSON errors).
    pub(super) error_lines: Option<(String, Vec<String>, Vec<String>)>,
    /// The last shell block run: its file and what it printed, for an output block below it.
    pub(super) last_run: Option<(String, Output)>,
    /// The health-check monitor the `--ping` examples' hc-ping.com stands for.
    pub(super) monitor: Option<Monitor>,
}

pub(super) const PASSWORD: &str = "doc-example-password";

/// The `--ping` examples' monitor (healthchecks.io's ping host) and the crontab's file that
/// holds such a URL.
pub(super) const PING_HOST: &str = "https://hc-ping.com/";
pub(super) const PING_FILE: &str = "/etc/lockrun/report.ping";

/// The servers a block's runs must reach.
#[derive(Clone, Copy)]
pub(super) enum Reach {
    Main,
    Password,
    Redlock,
}

/// A block's own directory: its stand-in jobs, the log they write, its files.
pub(super) struct Scratch {
    pub(super) _dir: tempfile::TempDir,
    /// The block's working directory (relative stand-ins live here).
    pub(super) work: PathBuf,
    /// Absolute stand-ins.
    pub(super) bin: PathBuf,
    pub(super) log: PathBuf,
}

impl Scratch {
    pub(super) fn new() -> Scratch {
        let dir = tempfile::tempdir().expect("tempdir");
        let work = dir.path().join("work");
        let bin = dir.path().join("bin");
        let log = dir.path().join("jobs.log");
        std::fs::create_dir_all(&work).unwrap();
        std::fs::create_dir_all(&bin).unwrap();
        for job in STAND_INS {
            let path = match job.strip_prefix("./") {
                Some(name) => work.join(name),
                None => bin.join(stand_in_name(job)),
            };
            let script = format!(
                "#!/bin/sh\necho \"{job} key=$LOCKRUN_KEY\" >> '{}'\n",
                log.display()
            );
            std::fs::write(&path, script).unwrap();
            chmod_x(&path);
        }
        Scratch {
            _dir: dir,
            work,
            bin,
            log,
        }
    }

    /// How many times the stand-in `job` ran.
    pub(super) fn runs(&self, job: &str) -> usize {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        log.lines()
            .filter(|l| l.split(' ').next() == Some(job))
            .count()
    }

    /// The PATH an example sees: lockrun first, then the system's.
    pub(super) fn path(&self) -> String {
        format!(
            "{}:/usr/local/bin:/usr/bin:/bin",
            lockrun_bin().parent().unwrap().display()
        )
    }
}

/// The file name of an absolute stand-in: its whole path, so that two jobs of the same name
/// (`/app/report.sh`, `/usr/local/bin/report.sh`) stay apart.
pub(super) fn stand_in_name(job: &str) -> String {
    job.trim_start_matches('/').replace('/', "_")
}

pub(super) fn chmod_x(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

impl Fixture {
    pub(super) fn new() -> Fixture {
        Fixture {
            main: Server::start_tcp(),
            redlock: None,
            password: None,
            error_lines: None,
            last_run: None,
            monitor: None,
        }
    }

    /// Fresh servers for each block: one block's held or kept keys (`--every`) must not make
    /// the next one skip.
    pub(super) fn flush(&self) {
        let servers = std::iter::once(&self.main)
            .chain(self.redlock.iter().flatten())
            .chain(&self.password);
        for s in servers {
            let _: () = s.cmd(&["FLUSHALL"]);
        }
    }

    /// What a block names that exists only on the reader's machines, and what it becomes here,
    /// with the servers the block's runs must reach. Starts the servers a block needs.
    pub(super) fn mapping(
        &mut self,
        text: &str,
        scratch: &Scratch,
    ) -> (Vec<(String, String)>, Reach) {
        let mut map = Vec::new();
        let reads_password_file = text.contains("/etc/lockrun/redis.pw");
        if reads_password_file && self.password.is_none() {
            self.password = Some(Server::start_with_password(PASSWORD));
        }
        let names_redlock = text.contains("redis://a:6379");
        if names_redlock && self.redlock.is_none() {
            self.redlock = Some((0..3).map(|_| Server::start_tcp()).collect());
        }
        // The quick start names the default, a local Redis on 6379: the test's listens on a
        // port of its own.
        map.push(("redis://127.0.0.1:6379".to_string(), self.main.url()));
        // The shared Redis of the crontab examples. Where the block reads the password from a
        // file, the URL carries no password, as the example teaches: a server that requires one.
        let internal = match &self.password {
            Some(p) if reads_password_file => format!("redis://127.0.0.1:{}", p.port()),
            _ => self.main.url(),
        };
        map.push(("redis://redis.internal:6379".to_string(), internal));
        // The password file the guide's crontab names (readable only by the job's user there).
        let pw_file = scratch.work.join("redis.pw");
        std::fs::write(&pw_file, format!("{PASSWORD}\n")).unwrap();
        map.push((
            "/etc/lockrun/redis.pw".to_string(),
            pw_file.display().to_string(),
        ));
        // The doctor transcript's local Redis on a unix socket.
        map.push((
            "unix:///run/redis/redis.sock".to_string(),
            format!("unix://{}", self.main.socket.display()),
        ));
        // The Redlock examples' three independent masters.
        if let Some(servers) = &self.redlock {
            for (host, s) in ["a", "b", "c"].iter().zip(servers) {
                map.push((format!("redis://{host}:6379"), s.url()));
            }
        }
        // node_exporter's textfile directory (Debian's), which the metrics crontab writes to.
        let textfile = scratch.work.join("node-exporter");
        std::fs::create_dir_all(&textfile).unwrap();
        map.push((
            "/var/lib/prometheus/node-exporter".to_string(),
            textfile.display().to_string(),
        ));
        // healthchecks.io's ping host, and the file the crontab's --ping-file names (holding
        // such a URL): a local monitor, which must get the block's pings ([`Fixture::pings`]).
        if text.contains(PING_HOST) || text.contains(PING_FILE) {
            let monitor = self.monitor.get_or_insert_with(Monitor::start);
            map.push((PING_HOST.to_string(), monitor.url("")));
            let file = scratch.work.join("report.ping");
            std::fs::write(&file, format!("{}\n", monitor.url("your-uuid-here"))).unwrap();
            map.push((PING_FILE.to_string(), file.display().to_string()));
        }
        // The absolute stand-in jobs.
        for job in STAND_INS.iter().filter(|j| j.starts_with('/')) {
            let stand_in = scratch.bin.join(stand_in_name(job));
            map.push((job.to_string(), stand_in.display().to_string()));
        }
        let reach = if names_redlock {
            Reach::Redlock
        } else if reads_password_file {
            Reach::Password
        } else {
            Reach::Main
        };
        (map, reach)
    }

    /// The requests the monitor got so far (0 without one).
    pub(super) fn pings(&self) -> usize {
        self.monitor.as_ref().map_or(0, |m| m.requests().len())
    }

    /// Whether the runs of a block left keys on each server it names.
    pub(super) fn reached(&self, reach: Reach) -> bool {
        let servers: Vec<&Server> = match reach {
            Reach::Main => vec![&self.main],
            Reach::Password => self.password.iter().collect(),
            Reach::Redlock => self.redlock.iter().flatten().collect(),
        };
        servers.iter().all(|s| !s.keys().is_empty())
    }
}

/// `text` with each mapped name replaced.
pub(super) fn substitute(text: &str, map: &[(String, String)]) -> String {
    map.iter().fold(text.to_string(), |t, (from, to)| {
        t.replace(from.as_str(), to)
    })
}

pub(super) fn explain(what: &str, script: &str, out: &Output) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{what}: exit {:?}", out.status.code());
    let _ = writeln!(s, "--- ran:\n{}", script.trim_end());
    let _ = writeln!(
        s,
        "--- stdout:\n{}",
        String::from_utf8_lossy(&out.stdout).trim_end()
    );
    let _ = write!(
        s,
        "--- stderr:\n{}",
        String::from_utf8_lossy(&out.stderr).trim_end()
    );
    s
}
