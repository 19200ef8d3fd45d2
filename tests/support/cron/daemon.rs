//! The daemons: Debian's `cron` and busybox `crond`, each a "host" in namespaces of its own,
//! and the tools they need.

use super::now;
use crate::support::{comm, descendants, kill, pgrp_and_state, process_tree};
use std::collections::BTreeSet;
use std::os::unix::fs::{chown, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::Duration;

/// Where Debian's cron lives (the crontab test fails without it: `bash tests/ensure-cron.sh`).
pub const CRON: &str = "/usr/sbin/cron";

/// The cron a host runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Daemon {
    /// Debian's `cron` (3.0pl1, every Debian/Ubuntu host's): its jobs get HOME, LOGNAME,
    /// SHELL=/bin/sh, PATH=/usr/bin:/bin and the crontab's environment lines, and run in /bin/sh
    /// (dash). It mails a job's output.
    Debian,
    /// busybox `crond` (Alpine's cron; here Debian's busybox-static): its jobs get HOME, LOGNAME,
    /// USER, SHELL, the daemon's own environment (its PATH), and of the crontab's environment
    /// lines only SHELL and MAILTO. They run in the daemon's $SHELL, else its user's login shell:
    /// `ash` gives the daemon busybox ash (Alpine's /bin/ash), otherwise root's login shell here
    /// (bash). Without a MAILTO line it mails nothing: a job's output goes where the daemon's own
    /// stdout and log go (a container's log).
    Busybox { ash: bool },
}

impl Daemon {
    /// The second of the minute, by the daemon's clock, it fires at (plus the fraction of a
    /// second it went to sleep at): Debian's cron sleeps until :01, busybox crond until :00.
    pub fn fire_second(self) -> f64 {
        match self {
            Daemon::Debian => 1.0,
            Daemon::Busybox { .. } => 0.0,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Daemon::Debian => "Debian cron",
            Daemon::Busybox { ash: true } => "busybox crond (ash)",
            Daemon::Busybox { ash: false } => "busybox crond (bash)",
        }
    }
}

/// Where an install channel of the README puts lockrun.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Channel {
    /// The static binary, the tarball and the container image: `/usr/local/bin`.
    UsrLocalBin,
    /// The .deb and the .rpm: `/usr/bin`.
    UsrBin,
    /// `cargo install`: the crontab user's `~/.cargo/bin`.
    Cargo,
}

impl Channel {
    pub fn label(self) -> &'static str {
        match self {
            Channel::UsrLocalBin => "/usr/local/bin",
            Channel::UsrBin => "/usr/bin",
            Channel::Cargo => "~/.cargo/bin",
        }
    }
}

/// The tools the test needs, found or the test fails saying how to get them (never skips).
pub struct Tools {
    pub libfaketime: PathBuf,
    /// busybox, with the crond and ash applets.
    pub busybox: PathBuf,
    /// Its first line (`BusyBox v1.35.0 (…)`), for the table.
    pub busybox_version: String,
    /// root's home directory (its crontab's HOME): the cargo channel's `~/.cargo/bin` is in it.
    pub root_home: PathBuf,
}

pub fn preflight() -> Tools {
    // SAFETY: geteuid(2) has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "the cron test runs real cron daemons, each in its own mount namespace with bind mounts \
         over /var/spool/cron, /etc/crontab, /run, /usr/sbin, /usr/local/bin and root's home: \
         that takes root. Run it as root (the CI container is), e.g. `sudo -E cargo test --test \
         lockrun cron_`"
    );
    for (tool, package) in [
        ("unshare", "util-linux"),
        ("mount", "mount"),
        ("hostname", "hostname"),
    ] {
        let found = ["/usr/bin", "/bin", "/usr/sbin", "/sbin"]
            .iter()
            .any(|d| Path::new(d).join(tool).is_file());
        assert!(
            found,
            "{tool} not found: the cron test needs it (Debian/Ubuntu: apt-get install {package})"
        );
    }
    assert!(
        Path::new(CRON).is_file(),
        "{CRON} not found: the cron test runs Debian's cron daemon. `bash tests/ensure-cron.sh` \
         installs it (and libfaketime, busybox-static) without starting the host's cron service"
    );
    let libfaketime = crate::support::clockshim::libfaketime();
    let busybox = ["/bin/busybox", "/usr/bin/busybox"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "busybox not found in /bin or /usr/bin: the cron test runs busybox crond (the \
                 cron of Alpine-based images). `bash tests/ensure-cron.sh` installs it \
                 (Debian/Ubuntu: apt-get install busybox-static)"
            )
        });
    let list = Command::new(&busybox).arg("--list").output().unwrap();
    let applets = String::from_utf8_lossy(&list.stdout);
    for applet in ["crond", "ash"] {
        assert!(
            applets.lines().any(|l| l == applet),
            "{} has no {applet} applet: the cron test runs busybox crond with busybox ash \
             (Debian/Ubuntu: apt-get install busybox-static)",
            busybox.display()
        );
    }
    let help = Command::new(&busybox).output().unwrap();
    let busybox_version = String::from_utf8_lossy(&help.stdout)
        .lines()
        .next()
        .unwrap_or("busybox")
        .trim()
        .trim_end_matches(" multi-call binary.")
        .to_string();
    let root_home = std::fs::read_to_string("/etc/passwd")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.len() >= 7 && f[0] == "root").then(|| PathBuf::from(f[5]))
        })
        .expect("root in /etc/passwd");
    // Each daemon sees the test's own directory in place of root's home (the cargo channel's
    // ~/.cargo/bin): what the test gives the daemons must not be in there.
    let own = [
        crate::support::lockrun_bin().to_path_buf(),
        std::env::temp_dir(),
    ];
    for p in own {
        let p = p.canonicalize().unwrap_or(p);
        assert!(
            !p.starts_with(&root_home) || root_home == Path::new("/"),
            "{}: under root's home, {}, which each test daemon sees replaced by a directory of \
             the test's (for the cargo channel's ~/.cargo/bin). Build elsewhere \
             (CARGO_TARGET_DIR) or point TMPDIR elsewhere",
            p.display(),
            root_home.display()
        );
    }
    Tools {
        libfaketime,
        busybox,
        busybox_version,
        root_home,
    }
}

/// The gid of Debian's `crontab` group (crontab(1) gives the spool and each crontab to it), or
/// root's where there is none: cron itself checks only the owner and the mode.
fn crontab_gid() -> u32 {
    std::fs::read_to_string("/etc/group")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.len() >= 3 && f[0] == "crontab").then(|| f[2].parse().ok())?
        })
        .unwrap_or(0)
}

/// A directory holding `sendmail`, a script that keeps each mail cron sends (its stdin) as a file
/// in `maildir`. Laid over `/usr/sbin` inside each daemon's namespace (see [`CronDaemon`]).
pub fn sendmail_layer(dir: &Path, maildir: &Path) -> PathBuf {
    let layer = dir.join("sendmail-layer");
    std::fs::create_dir_all(&layer).unwrap();
    std::fs::create_dir_all(maildir).unwrap();
    let script = layer.join("sendmail");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n\
             # Stands in for /usr/sbin/sendmail in a test cron daemon's namespace: cron mails a \
             job's output through it (arguments such as -t -oi are ignored). One file per mail.\n\
             cat > '{}'/\"$(uname -n).$$.$(date +%s%N)\"\n",
            maildir.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    layer
}

/// The mails a configuration's daemons sent (contents, oldest name first).
pub fn mails(maildir: &Path) -> Vec<String> {
    let mut names: Vec<PathBuf> = std::fs::read_dir(maildir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    names.sort();
    names
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap_or_default())
        .collect()
}

/// What busybox crond logs of its own at its default level: its start, and each job it starts.
/// Every other line of its log is a job's output (or an error of the daemon's).
pub fn is_busybox_log_line(line: &str) -> bool {
    let Some(rest) = line.strip_prefix("crond: ") else {
        return false;
    };
    (rest.starts_with("crond (busybox ") && rest.contains(" started, log level "))
        || (rest.starts_with("USER ") && rest.contains(" pid ") && rest.contains(" cmd "))
}

/// What a daemon is given.
pub struct DaemonSpec<'a> {
    /// Its own directory (spool, /run, files); created.
    pub dir: PathBuf,
    pub host: String,
    pub daemon: Daemon,
    /// Where the binary under test is put, in the daemon's namespace.
    pub channel: Channel,
    /// The user crontab of root.
    pub crontab: &'a str,
    /// From [`sendmail_layer`].
    pub sendmail_layer: &'a Path,
    /// The daemon's clock minus the real one, in seconds (0: no libfaketime at all).
    pub skew_s: i32,
    pub tools: &'a Tools,
    /// A network namespace to run in (`/run/netns/<name>`, a [`crate::support::netns::Net`] host's), so
    /// that a test can cut the host off; `None`: the test's own network.
    pub netns: Option<&'a Path>,
}

/// A real cron daemon as a host: `unshare -m -u -p -f --kill-child --mount-proc` runs a start
/// script that mounts the daemon's own files over the host's and execs the daemon. Dropping it
/// (also while a panic unwinds) kills the daemon and every process of its PID namespace.
pub struct CronDaemon {
    pub host: String,
    pub daemon: Daemon,
    pub skew_s: i32,
    pub dir: PathBuf,
    unshare: Child,
    /// The daemon's pid (as the host sees it), the child of `unshare`, once it is running.
    cron: Option<u32>,
    /// The daemon's PID namespace (`pid:[inode]`): no process may be left in it at the end.
    pid_ns: Option<String>,
    /// What it printed, read by [`CronDaemon::stop`] before it kills the daemon.
    printed: Option<String>,
}

impl CronDaemon {
    /// Sets up the daemon's files and starts it (not waiting: see [`CronDaemon::wait_ready`]).
    pub fn start(spec: &DaemonSpec) -> CronDaemon {
        let d = &spec.dir;
        let tools = spec.tools;
        let mkdir = |p: &Path, mode: u32| {
            std::fs::create_dir_all(p).unwrap();
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
        };
        // The spool as Debian's package and crontab(1) make it: crontabs/ root:crontab 1730, the
        // user crontab named after the user, owned by root (cron: "WRONG FILE OWNER" otherwise),
        // mode 0600 ("INSECURE MODE (mode 0600 expected)"), one link, ending in a newline
        // ("Missing newline before EOF, this crontab file will be ignored"). busybox crond reads
        // the same /var/spool/cron/crontabs/<user> (its default -c).
        let spool = d.join("spool");
        mkdir(&spool, 0o755);
        let crontabs = spool.join("crontabs");
        mkdir(&crontabs, 0o1730);
        let gid = crontab_gid();
        chown(&crontabs, Some(0), Some(gid)).unwrap();
        let tab = crontabs.join("root");
        assert!(spec.crontab.ends_with('\n'));
        std::fs::write(&tab, spec.crontab).unwrap();
        std::fs::set_permissions(&tab, std::fs::Permissions::from_mode(0o600)).unwrap();
        chown(&tab, Some(0), Some(gid)).unwrap();
        // An empty /etc/crontab and /etc/cron.d: the daemon must run the test's crontab only, not
        // the host's run-parts of cron.hourly and friends (nor any package's /etc/cron.d file).
        let etc_crontab = d.join("etc-crontab");
        std::fs::write(&etc_crontab, "").unwrap();
        std::fs::set_permissions(&etc_crontab, std::fs::Permissions::from_mode(0o644)).unwrap();
        mkdir(&d.join("cron.d"), 0o755);
        // Its own /run: both daemons write /run/crond.pid (Debian's cron refuses to start when
        // another daemon holds the host's) and /run/crond.reboot (the @reboot marker) there.
        mkdir(&d.join("run"), 0o755);
        std::fs::write(d.join("empty"), "").unwrap();
        // lockrun where the channel puts it and nowhere else: the daemon sees directories of the
        // test's in place of the host's /usr/local/bin and root's home (the channel's holding an
        // empty file to bind the binary onto), and for the .deb/.rpm channel a layer with that
        // file over /usr/bin.
        let usr_local = d.join("usr-local-bin");
        mkdir(&usr_local, 0o755);
        let home = d.join("home");
        mkdir(&home.join(".cargo/bin"), 0o755);
        let usr_bin_layer = d.join("usr-bin-layer");
        mkdir(&usr_bin_layer, 0o755);
        let (placeholder, installed) = match spec.channel {
            Channel::UsrLocalBin => (usr_local.join("lockrun"), PathBuf::from("/usr/local/bin")),
            Channel::UsrBin => (usr_bin_layer.join("lockrun"), PathBuf::from("/usr/bin")),
            Channel::Cargo => (
                home.join(".cargo/bin/lockrun"),
                tools.root_home.join(".cargo/bin"),
            ),
        };
        std::fs::write(&placeholder, "").unwrap();
        std::fs::set_permissions(&placeholder, std::fs::Permissions::from_mode(0o755)).unwrap();
        let installed = installed.join("lockrun");
        let q = |p: &Path| format!("'{}'", p.display());
        let usr_bin = match spec.channel {
            Channel::UsrBin => format!(
                "mount -n -t overlay overlay -o lowerdir={}:/usr/bin /usr/bin\n",
                q(&usr_bin_layer)
            ),
            _ => String::new(),
        };
        let system_crontabs = match spec.daemon {
            Daemon::Debian => format!(
                "# Empty system crontabs.\n\
                 mount -n --bind {} /etc/crontab\n\
                 mount -n --bind {} /etc/cron.d\n",
                q(&etc_crontab),
                q(&d.join("cron.d"))
            ),
            Daemon::Busybox { .. } => String::new(),
        };
        let run_daemon = match spec.daemon {
            Daemon::Debian => {
                let faketime = match spec.skew_s {
                    0 => String::new(),
                    s => format!(
                        "# This daemon's clock runs {s:+} s off the real one: libfaketime, preloaded into cron\n\
                         # only. cron does not pass its own environment to its jobs, so the job (and lockrun)\n\
                         # read the real clock, and the job log's real start times show when this daemon fired.\n\
                         export LD_PRELOAD={} FAKETIME='{s:+}s'\n",
                        q(&tools.libfaketime)
                    ),
                };
                format!(
                    "{faketime}\
                     # -f: stay in the foreground, the test's child. -L 0: log errors only (to nowhere).\n\
                     exec {CRON} -f -L 0\n"
                )
            }
            Daemon::Busybox { ash } => {
                assert_eq!(
                    spec.skew_s, 0,
                    "{}: busybox-static is a static binary, libfaketime cannot skew its clock",
                    spec.host
                );
                let shell = if ash {
                    // The applet by its name, as Alpine's /bin/ash is a link to busybox.
                    let ash = d.join("ash");
                    std::os::unix::fs::symlink(&tools.busybox, &ash).unwrap();
                    format!(
                        "# Its jobs' shell: busybox ash, as on Alpine (the daemon's $SHELL).\n\
                         export SHELL={}\n",
                        q(&ash)
                    )
                } else {
                    "# Its jobs' shell: root's login shell (no $SHELL).\n".to_string()
                };
                format!(
                    "{shell}\
                     # -f: stay in the foreground, the test's child. -L: log to the file that is\n\
                     # also its stdout (else syslog); with no MAILTO its jobs write there too.\n\
                     exec {} crond -f -L {}\n",
                    q(&tools.busybox),
                    q(&d.join("daemon.err"))
                )
            }
        };
        let script = format!(
            "#!/bin/sh\n\
             # Host {host} of the cron test ({daemon}, lockrun in {channel}), run by `unshare -m -u -p\n\
             # -f --mount-proc`: a mount, UTS and PID namespace of its own, whose mounts are private\n\
             # (none propagates to the host).\n\
             set -e\n\
             # -n: mount(8) would otherwise record each mount in /run/mount/utab, creating that file\n\
             # on the host's /run. /run first: the daemon's pid file and @reboot marker go there.\n\
             mount -n --bind {run} /run\n\
             # The spool with the test's user crontab.\n\
             mount -n --bind {spool} /var/spool/cron\n\
             {system_crontabs}\
             # cron mails a job's output through /usr/sbin/sendmail: a read-only overlay puts the\n\
             # recorder's directory above the real /usr/sbin (whose files stay visible below it).\n\
             mount -n -t overlay overlay -o lowerdir={layer}:/usr/sbin /usr/sbin\n\
             # cron logs to syslog: a host's syslog socket must not receive the test daemons' lines\n\
             # (on systemd hosts /dev/log points into /run/systemd, already hidden by /run above).\n\
             if [ -S /dev/log ]; then mount -n --bind {empty} /dev/log; fi\n\
             # lockrun in {channel} and nowhere else on any PATH.\n\
             mount -n --bind {usr_local} /usr/local/bin\n\
             mount -n --bind {home} {root_home}\n\
             {usr_bin}\
             mount -n --bind {lockrun} {installed}\n\
             for dir in /usr/local/sbin /usr/local/bin {root_home}/.cargo/bin /usr/sbin /usr/bin /sbin /bin; do\n\
             \x20 if [ -e \"$dir/lockrun\" ] && ! [ \"$dir/lockrun\" -ef {installed} ]; then\n\
             \x20   echo \"$dir/lockrun: a lockrun installed on this host; the cron test needs none but the one it puts in {channel}\" >&2\n\
             \x20   exit 1\n\
             \x20 fi\n\
             done\n\
             # The hostname lockrun records and the job logs, in this UTS namespace only.\n\
             hostname {host}\n\
             {run_daemon}",
            host = spec.host,
            daemon = spec.daemon.label(),
            channel = spec.channel.label(),
            run = q(&d.join("run")),
            spool = q(&spool),
            layer = q(spec.sendmail_layer),
            empty = q(&d.join("empty")),
            usr_local = q(&usr_local),
            home = q(&home),
            root_home = q(&tools.root_home),
            lockrun = q(crate::support::lockrun_bin()),
            installed = q(&installed),
        );
        let start = d.join("start.sh");
        std::fs::write(&start, script).unwrap();
        // Appending: busybox crond reopens its log (this file) with O_APPEND at every wake-up,
        // and its jobs write to the same file through its stdout; without O_APPEND here too
        // they would overwrite each other.
        let err = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(d.join("daemon.err"))
            .unwrap();
        // In a network namespace, `nsenter --net` execs unshare: the child is unshare all the same.
        let mut cmd = match spec.netns {
            Some(ns) => {
                let mut cmd = Command::new("nsenter");
                cmd.arg(format!("--net={}", ns.display()))
                    .args(["--", "unshare"]);
                cmd
            }
            None => Command::new("unshare"),
        };
        // -p -f --mount-proc: the daemon is PID 1 of a namespace of its own (with a /proc to
        // match, for lockrun's own /proc reads). When such an init dies the kernel kills every
        // process in the namespace, so a job cannot outlive its daemon. --kill-child: unshare
        // stays as the daemon's parent, which gets SIGKILL when unshare dies. (-m gives private
        // propagation.)
        cmd.args([
            "-m",
            "-u",
            "-p",
            "-f",
            "--kill-child=SIGKILL",
            "--mount-proc",
        ])
        .args(["--propagation", "private", "sh"])
        .arg(&start)
        // The daemon starts with an init's bare environment: nothing of the test's (LOCKRUN_*,
        // RUST_*) reaches it, and its PATH lacks /usr/local/bin, as a system service's does.
        // Debian's cron passes none of it to its jobs; busybox crond passes all of it.
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .stdin(Stdio::null())
        .stdout(err.try_clone().unwrap())
        .stderr(err);
        // SAFETY: prctl(2) is async-signal-safe; nothing else runs between fork and exec. With
        // PR_SET_PDEATHSIG unshare gets SIGKILL when the thread that started it ends, so the
        // daemons die with their configuration's thread (and with the whole test process, even
        // one killed without unwinding), and unshare's --kill-child takes the daemon with it.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let unshare = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start unshare for {}: {e}", spec.host));
        CronDaemon {
            host: spec.host.clone(),
            daemon: spec.daemon,
            skew_s: spec.skew_s,
            dir: spec.dir.clone(),
            unshare,
            cron: None,
            pid_ns: None,
            printed: None,
        }
    }

    /// What the daemon printed: unshare, mount and daemon errors, and for busybox crond its log
    /// and its jobs' output.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.join("daemon.err")).unwrap_or_default()
    }

    /// The lines the daemon printed until [`CronDaemon::stop`] that are no log line of its own:
    /// a job's output (busybox crond without MAILTO, the README's), or an error.
    pub fn output(&self) -> Vec<String> {
        self.printed
            .clone()
            .unwrap_or_else(|| self.stderr())
            .lines()
            .filter(|l| !is_busybox_log_line(l))
            .map(str::to_string)
            .collect()
    }

    /// Waits (until `deadline`, real clock) for the daemon to run: its pid file written (after
    /// it has read the crontabs) and the process its own.
    pub fn wait_ready(&mut self, deadline: f64) -> Result<(), String> {
        let pidfile = self.dir.join("run/crond.pid");
        let comm_wanted = match self.daemon {
            Daemon::Debian => "cron",
            Daemon::Busybox { .. } => "busybox",
        };
        loop {
            if let Some(status) = self.unshare.try_wait().unwrap() {
                return Err(format!(
                    "{}: the daemon exited at start ({status}): {}",
                    self.host,
                    self.stderr()
                ));
            }
            let kid = descendants(self.unshare.id()).first().copied();
            let comm = |pid: u32| std::fs::read_to_string(format!("/proc/{pid}/comm"));
            let written = std::fs::read_to_string(&pidfile).is_ok_and(|s| !s.trim().is_empty());
            if let Some(pid) =
                kid.filter(|p| written && comm(*p).is_ok_and(|c| c.trim() == comm_wanted))
            {
                self.cron = Some(pid);
                self.pid_ns = std::fs::read_link(format!("/proc/{pid}/ns/pid"))
                    .ok()
                    .map(|p| p.display().to_string());
                return Ok(());
            }
            if now() > deadline {
                return Err(format!(
                    "{}: {} not running in time; {}",
                    self.host,
                    self.daemon.label(),
                    self.stderr()
                ));
            }
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// The pids (as the test sees them) of every process in the daemon's PID namespace, the
    /// daemon first: the whole "host". Empty before [`CronDaemon::wait_ready`].
    pub fn processes(&self) -> Vec<u32> {
        let Some(ns) = &self.pid_ns else {
            return Vec::new();
        };
        let mut pids: Vec<u32> = std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_string_lossy().parse::<u32>().ok())
            .filter(|pid| {
                std::fs::read_link(format!("/proc/{pid}/ns/pid"))
                    .is_ok_and(|p| p.display().to_string() == *ns)
            })
            .collect();
        pids.sort_by_key(|p| (Some(*p) != self.cron, *p));
        pids
    }

    /// The host's lockrun that runs a job, and the job's process group.
    pub fn lockrun_and_job(&self) -> Result<(u32, u32), String> {
        let found: Vec<(u32, u32)> = self
            .processes()
            .into_iter()
            .filter(|p| comm(*p) == "lockrun")
            .filter_map(|p| {
                let kid = descendants(p).first().copied()?;
                Some((p, pgrp_and_state(kid)?.0))
            })
            .collect();
        match found[..] {
            [one] => Ok(one),
            _ => Err(format!(
                "{}: {} lockruns running a job (one expected):\n{}",
                self.host,
                found.len(),
                self.processes()
                    .iter()
                    .map(|p| format!("  {p} {}\n", comm(*p)))
                    .collect::<String>()
            )),
        }
    }

    /// Whether a process of the group is alive (a zombie is not: it only waits to be reaped).
    pub fn group_alive(&self, pgid: u32) -> bool {
        self.processes()
            .into_iter()
            .filter_map(pgrp_and_state)
            .any(|(g, state)| g == pgid && state != 'Z')
    }

    /// SIGSTOP to every process of the host until no new one appears; returns them.
    pub fn freeze(&self) -> Vec<u32> {
        let mut stopped: BTreeSet<u32> = BTreeSet::new();
        loop {
            let new: Vec<u32> = self
                .processes()
                .into_iter()
                .filter(|p| !stopped.contains(p))
                .collect();
            if new.is_empty() {
                return stopped.into_iter().collect();
            }
            for p in new {
                // From the parent PID namespace SIGSTOP reaches its init too.
                kill(p, libc::SIGSTOP);
                stopped.insert(p);
            }
        }
    }

    /// Still running?
    pub fn check_alive(&mut self) -> Result<(), String> {
        match self.unshare.try_wait().unwrap() {
            None => Ok(()),
            Some(status) => Err(format!(
                "{}: the cron daemon exited ({status}): {}",
                self.host,
                self.stderr()
            )),
        }
    }

    /// Lets running jobs finish (cron has no live children left: its per-job children wait for
    /// the job and send its mail), for at most `patience`, then kills the daemon and checks that
    /// no process is left in its PID namespace. Returns what went wrong.
    pub fn stop(&mut self, patience: Duration) -> Vec<String> {
        let mut problems = Vec::new();
        if let Some(cron) = self.cron {
            let start = std::time::Instant::now();
            // A zombie has ended: busybox crond reaps its jobs only when it next wakes (up to a
            // minute later), and waiting for that could run into the next tick's fire.
            let zombie = |pid: &u32| {
                std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .is_ok_and(|s| s.rsplit_once(") ").is_some_and(|(_, r)| r.starts_with('Z')))
            };
            while !descendants(cron).iter().all(zombie) {
                if start.elapsed() > patience {
                    problems.push(format!(
                        "{}: jobs still running {patience:?} after the last tick, killed:\n{}",
                        self.host,
                        process_tree(cron, 0)
                    ));
                    break;
                }
                thread::sleep(Duration::from_millis(20));
            }
        }
        // What it printed while it ran: once it is killed, unshare adds a line of its own
        // (util-linux 2.38's `sigprocmask unblock failed` after its child dies of SIGKILL).
        self.printed = Some(self.stderr());
        problems.extend(self.kill());
        problems
    }

    /// SIGKILL to cron (a PID namespace's init ignores SIGTERM unless it handles it, and Debian's
    /// cron does not): the kernel then kills the rest of its namespace, unshare reaps cron and
    /// exits, and the test reaps unshare, so no zombie is left either.
    fn kill(&mut self) -> Vec<String> {
        // cron's pid is still cron's while unshare, its parent, has not reaped it; otherwise
        // (cron gone or never seen) SIGKILL to unshare reaches cron through --kill-child.
        let unshare_running = matches!(self.unshare.try_wait(), Ok(None));
        match self.cron.take() {
            Some(pid) if unshare_running => kill(pid, libc::SIGKILL),
            _ => {
                let _ = self.unshare.kill();
            }
        }
        if crate::support::wait_timeout(&mut self.unshare, Duration::from_secs(10)).is_none() {
            let _ = self.unshare.kill();
            let _ = self.unshare.wait();
        }
        // Every process of the namespace is gone once its init is reaped; look, to be sure.
        let left: Vec<String> = self
            .processes()
            .into_iter()
            .map(|pid| process_tree(pid, 0))
            .collect();
        self.pid_ns = None;
        if left.is_empty() {
            Vec::new()
        } else {
            vec![format!(
                "{}: processes left in the daemon's PID namespace:\n{}",
                self.host,
                left.concat()
            )]
        }
    }
}

impl Drop for CronDaemon {
    fn drop(&mut self) {
        if self.unshare.try_wait().ok().flatten().is_none() || self.cron.is_some() {
            self.kill();
        }
    }
}
