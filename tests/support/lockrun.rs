//! Running the real binary: [`Lockrun`] puts a command line together (server URLs, arguments,
//! environment, always without the test process's own LOCKRUN_* variables) and starts it in
//! the [`Background`]; it is a [`Command`] underneath for everything else (`spawn`, pipes,
//! `pre_exec`; [`super::run`] runs one to completion). Chaos scenarios and the network
//! namespaces build theirs with it too.

use super::server::Server;
use super::{kill, wait_timeout, PATIENCE};
use std::ffi::OsStr;
use std::fs::File;
use std::ops::{Deref, DerefMut};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// A lockrun command line being put together.
pub struct Lockrun {
    cmd: Command,
}

impl Lockrun {
    /// `lockrun` with a clean environment (no LOCKRUN_* leaks in from whatever runs the tests,
    /// which might itself run under lockrun) and stdin closed.
    pub fn bare() -> Lockrun {
        Lockrun::via(Command::new(lockrun_bin()))
    }

    /// `lockrun -r <url of server>`.
    pub fn on(server: &Server) -> Lockrun {
        Lockrun::bare().url(server.url())
    }

    /// `lockrun -r <url>…`, one `-r` per URL.
    pub fn to(urls: &[impl AsRef<OsStr>]) -> Lockrun {
        urls.iter().fold(Lockrun::bare(), |l, u| l.url(u))
    }

    /// `program` (which runs lockrun, e.g. `nsenter --net=… -- lockrun`) with lockrun's clean
    /// environment and stdin.
    pub fn via(mut program: Command) -> Lockrun {
        from_a_clean_caller(&mut program);
        program.stdin(Stdio::null());
        Lockrun { cmd: program }
    }

    /// One more `-r <url>`.
    pub fn url(mut self, url: impl AsRef<OsStr>) -> Lockrun {
        self.cmd.arg("-r").arg(url);
        self
    }

    /// Starts lockrun with its output in `dir/name.out` and `dir/name.err`.
    pub fn background(mut self, dir: &Path, name: &str) -> Background {
        let out = dir.join(format!("{name}.out"));
        let err = dir.join(format!("{name}.err"));
        self.cmd
            .stdout(File::create(&out).unwrap())
            .stderr(File::create(&err).unwrap());
        let child = self.cmd.spawn().expect("spawn lockrun");
        Background { child, out, err }
    }
}

impl Deref for Lockrun {
    type Target = Command;
    fn deref(&self) -> &Command {
        &self.cmd
    }
}

impl DerefMut for Lockrun {
    fn deref_mut(&mut self) -> &mut Command {
        &mut self.cmd
    }
}

impl From<Lockrun> for Command {
    fn from(l: Lockrun) -> Command {
        l.cmd
    }
}

/// `lockrun history --json KEY` on `server`: the key's runs, newest first (it must exit 0).
pub fn history(server: &Server, key: &str) -> Vec<serde_json::Value> {
    history_of(server, key, &[])
}

/// [`history`], its last `count` runs (`-n`) rather than the default 20.
pub fn history_n(server: &Server, key: &str, count: usize) -> Vec<serde_json::Value> {
    history_of(server, key, &["-n", &count.to_string()])
}

fn history_of(server: &Server, key: &str, more: &[&str]) -> Vec<serde_json::Value> {
    let mut cmd = Lockrun::on(server);
    cmd.args(["history", "--json"]).args(more).arg(key);
    let out = super::run(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", super::stderr_of(&out));
    let runs: serde_json::Value = serde_json::from_str(&super::stdout_of(&out)).unwrap();
    runs.as_array().expect("a JSON array").clone()
}

/// The binary under test: this build's, or the one `LOCKRUN_BIN` names (another build, to show
/// that a test fails on the code before a fix: `LOCKRUN_BIN=<old>/lockrun cargo test …`).
pub fn lockrun_bin() -> &'static Path {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        std::env::var_os("LOCKRUN_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_lockrun")))
    })
}

/// What lockrun (or the program that starts it) inherits from the test process is only what the
/// test says: no LOCKRUN_* variable the test process itself may have inherited, and the signals
/// lockrun forwards (every one tests send) at their default disposition. A test run started in
/// the background by a shell without job control (`bash tests/run.sh &`, a CI runner's script)
/// has SIGINT and SIGQUIT ignored, `nohup` SIGHUP too, and an ignored signal stays ignored
/// across exec; lockrun keeps a signal ignored on entry ignored (the `nohup lockrun` promise,
/// tested on its own), so every test that sends one would see nothing arrive. A test that wants
/// one ignored sets that up after this.
pub fn from_a_clean_caller(cmd: &mut Command) {
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("LOCKRUN_") {
            cmd.env_remove(k);
        }
    }
    // The list is made here: the child between fork and exec must not allocate.
    let forwarded = ::lockrun::signals::forwarded();
    // SAFETY: only signal(2), async-signal-safe, between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            for &sig in &forwarded {
                libc::signal(sig, libc::SIG_DFL);
            }
            Ok(())
        });
    }
}

/// A lockrun started in the background whose stdout and stderr go to files (nothing can block
/// on a full pipe, and a test that fails can show what it said so far). Stopped on drop:
/// SIGTERM (lockrun passes it on to the job), then SIGKILL.
pub struct Background {
    child: Child,
    out: PathBuf,
    err: PathBuf,
}

impl Background {
    /// lockrun's process id (a job's `$PPID`, and the `pid=` of the lock value it writes).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.out).unwrap_or_default()).into_owned()
    }

    /// Lossy: a log line may quote bytes that are not UTF-8, and losing the whole log to one
    /// of them would hide exactly what a failure needs shown.
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.err).unwrap_or_default()).into_owned()
    }

    /// Whether lockrun has not exited yet.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Polls `cond` until it holds; fails at once (with lockrun's output) if lockrun exits
    /// first, or after PATIENCE.
    pub fn until(&mut self, what: &str, cond: impl FnMut() -> bool) {
        self.until_or_explain(what, cond, String::new);
    }

    /// [`Background::until`] whose failure message ends with `explain()` (the state of the servers).
    pub fn until_or_explain(
        &mut self,
        what: &str,
        mut cond: impl FnMut() -> bool,
        explain: impl Fn() -> String,
    ) {
        let start = Instant::now();
        while start.elapsed() < PATIENCE {
            if cond() {
                return;
            }
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                panic!(
                    "lockrun exited ({status}) before {what}\nstdout:\n{}\nstderr:\n{}\n{}",
                    self.stdout(),
                    self.stderr(),
                    explain()
                );
            }
            thread::sleep(Duration::from_millis(20));
        }
        panic!(
            "timed out waiting for {what}\nstderr so far:\n{}",
            self.stderr()
        );
    }

    /// Waits (at most PATIENCE) for lockrun to exit: its exit code, stdout, stderr.
    pub fn finish(mut self) -> (Option<i32>, String, String) {
        let status = wait_timeout(&mut self.child, PATIENCE).unwrap_or_else(|| {
            panic!(
                "lockrun still running after {PATIENCE:?}\n{}",
                self.stderr()
            )
        });
        (status.code(), self.stdout(), self.stderr())
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            kill(self.child.id(), libc::SIGTERM);
            if wait_timeout(&mut self.child, Duration::from_secs(5)).is_none() {
                let _ = self.child.kill();
                let _ = self.child.wait();
            }
        }
    }
}

/// A `sh -c` snippet that waits (at most 30 s, so an orphaned job cannot linger) until `file`
/// exists: the test's way of letting a job end when it chooses.
pub fn wait_for_go(file: &Path) -> String {
    format!(
        "i=0; while [ ! -e '{}' ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done",
        file.display()
    )
}
