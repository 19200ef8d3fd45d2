//! Every fenced code block of README.md and docs/*.md (not the generated benchmarks.md) is run
//! against real servers, or, where it cannot run here, checked: an example a reader pastes must
//! work as pasted. A failure names the block by `file:line` (its opening fence).
//!
//! How each block is handled, by its info string:
//!
//! - `sh`, `bash`, `shell`: run as one script with `bash -e` in a fresh directory (a block is
//!   pasted whole, and -e stops at the first failing command instead of hiding it), the built
//!   lockrun first on PATH, `REDIS` and `LOCKRUN_REDIS_URL` naming the test's server. It must
//!   exit 0, every stand-in job it names must have run, and the servers it names must hold the
//!   keys of its runs (a run that went to some other Redis on 6379 proves nothing). A block
//!   using one of [`NEVER_RUN`] (installs, root, Docker, the test suite) is refused unrun: it
//!   must be marked syntax-only.
//! - `cron`: each line is a variable (`NAME=value`) or five time fields and a command. A
//!   variable other than `SHELL` and `MAILTO` is refused: busybox crond (Alpine's cron) passes
//!   no other to its jobs, so the line must carry what it needs. The command is run once through
//!   `sh -c` with only the block's variables, HOME and cron's PATH (`/usr/bin:/bin`), as cron
//!   runs it, and lockrun where `cargo install` puts it (`$HOME/.cargo/bin`, on no cron's PATH);
//!   it must exit 0 and, under `-q`, print nothing (cron mails whatever is printed). A line with
//!   `--every` or `--min-hold` is run a second time at once: the tick is taken, so it must exit
//!   0 under `-E 0` (else 75), silently under `-q`, without running the job again. A line whose
//!   PATH prefix names `$HOME/.cargo/bin` is also run without HOME, as a service that reuses it
//!   may (runit gives none): lockrun must then not be found (127), as the README says. (tests/cases/cron.rs runs
//!   the README's crontab on real daemons, lockrun where each install channel puts it.)
//! - `anacrontab`: each line is a variable (`NAME=value`, which anacron passes to its jobs) or
//!   a period, a delay and a job name, then a command. The command is run as a `cron` line's is
//!   (once, and at once a second time when it keeps its key). (tests/cases/anacron.rs runs the
//!   guide's anacrontab on the real anacron, hosts and days apart.)
//! - `yaml`: cannot run here (GitHub Actions, GitLab CI, Kubernetes), so it must carry the
//!   syntax-only marker. It must parse; every `run:`/`script:` line must pass `bash -n`, start
//!   with a command that exists, and use only `$VARIABLES` the example defines (`env:`,
//!   `variables:`); `cargo install` must install this package; every lockrun invocation (a
//!   line, or a container's `command:`) is run against the test's server with the example's
//!   `LOCKRUN_*` variables and the job replaced by `true`, and must print nothing but the
//!   acquire and release lines. A block that is a copy of a repository file ([`COPIES`]) must
//!   still equal it. A GitHub Actions workflow or GitLab CI job also passes the real validators
//!   (ci_examples.rs).
//! - `dockerfile`: no Docker here, so syntax-only too: every line is an instruction, a `COPY
//!   --from=lockrun` names the path lockrun has in packaging/Dockerfile, and a `CMD` is lockrun's
//!   arguments (checked as above).
//! - `console`, or no info string and starting with `$ `: a transcript. Each `$` command is run (the keys it
//!   names held by a job of the test, with a finished run in their history, as shown), and must
//!   print what is shown in shape: the report's first line (a table's header, `key:`), each log
//!   line's level and message, no error that is not shown; `$ echo $?` the exit code shown.
//! - No info string, marked `output`: what the shell block above it prints. Each log line shown
//!   (level and message) must be printed at least as often as shown, a table header shown must
//!   be printed; the rest (times, hosts, pids) differs from run to run and is not compared.
//! - Other blocks with no info string, or `text`, `ini`, `promql`: output, synopses (`lockrun
//!   status <KEY>`) and configuration excerpts (the ACL lines are tested word for word by
//!   server_refusals.rs); not run. A marker on one is an error (it would suggest a check that
//!   does not happen).
//! - Any other info string fails the test: a new kind of example needs a decision here.
//!
//! Markers, an HTML comment on the nearest non-blank line above the fence (invisible when the
//! Markdown is rendered):
//!
//! - `<!-- example: syntax-only: WHY -->`: the block cannot run here (another host, Docker, root,
//!   a whole test suite). Shell is checked with `bash -n`, each command must exist (on PATH, a
//!   builtin, lockrun, a stand-in job, or one of [`OUTSIDE_TOOLS`]) and each repository path it
//!   names must exist. A `cron` block cannot be marked: it can always run.
//! - `<!-- example: output -->`: an output block, compared with the shell block above it.
//! - `<!-- example: filter: lockrun's error lines -->`: each line of the block is a filter (a
//!   grep). It is fed what lockrun writes on stderr, text and JSON, successes and errors of
//!   every stage, and must print exactly the error lines of one format.
//!
//! Hosts and paths that exist only on the reader's machines are mapped by [`Fixture::mapping`],
//! a table with a comment per entry; jobs that are placeholders for the reader's own
//! ([`STAND_INS`]) are scripts the test writes, which log that they ran.

use crate::support::monitor::Monitor;
use crate::support::{lockrun_bin, Server};
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The placeholders for the reader's own job, each replaced by a stand-in script that logs
/// that it ran: relative ones in the block's directory, absolute ones by [`Fixture::mapping`].
const STAND_INS: &[&str] = &[
    "./deploy.sh",
    "./reindex.sh",
    "./job.sh",
    "/usr/local/bin/report.sh",
    "/usr/local/bin/job.sh",
    "/app/report.sh",
];

/// Commands a syntax-only example may use without their being installed here: the block
/// cannot run precisely because they are what it needs.
const OUTSIDE_TOOLS: &[&str] = &["docker", "docker-compose"];

/// Commands an unmarked block is never run with, because they change the machine (install,
/// build, need root) or take minutes: such a block must be marked syntax-only. Checked before
/// anything runs, so that a block added without its marker fails instead of installing packages.
const NEVER_RUN: &[&str] = &[
    "sudo",
    "apt-get",
    "dpkg",
    "docker",
    "docker-compose",
    "cargo",
    "chgrp",
    "tests/run.sh",
    "tests/demo.sh",
    "tests/ha-table.sh",
    "packaging/build-static.sh",
];

/// Blocks that are a copy of a repository file (that file minus its leading comment lines):
/// the README shows the manifest the repository ships, and the two must not drift apart.
const COPIES: &[(&str, &str)] = &[("README.md", "packaging/kubernetes/cronjob.yaml")];

/// One fenced code block.
pub(super) struct Block {
    /// Relative to the repository root.
    pub(super) file: String,
    /// The opening fence's line (1-based).
    pub(super) line: usize,
    pub(super) info: String,
    /// The text of a `<!-- example: … -->` comment above it, if any.
    pub(super) marker: Option<String>,
    pub(super) body: String,
}

/// README.md and docs/*.md but the generated benchmarks.md, sorted.
fn documents() -> Vec<String> {
    let mut docs: Vec<String> = std::fs::read_dir(root().join("docs"))
        .expect("docs/")
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md") && n != "benchmarks.md")
        .map(|n| format!("docs/{n}"))
        .collect();
    docs.sort();
    docs.insert(0, "README.md".to_string());
    docs
}

/// Every fenced block of `text`; a fence may be indented (a block inside a list item), and its
/// lines lose that indentation.
fn blocks_of(file: &str, text: &str) -> Vec<Block> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let trimmed = lines[i].trim_start();
        if !trimmed.starts_with("```") {
            i += 1;
            continue;
        }
        let indent = lines[i].len() - trimmed.len();
        let info = trimmed.trim_start_matches('`').trim().to_string();
        let marker = lines[..i]
            .iter()
            .rev()
            .find(|l| !l.trim().is_empty())
            .map(|l| l.trim())
            .and_then(|l| l.strip_prefix("<!-- example:"))
            .and_then(|l| l.strip_suffix("-->"))
            .map(|m| m.trim().to_string());
        let start = i;
        let mut body = String::new();
        i += 1;
        while i < lines.len() && !lines[i].trim_start().starts_with("```") {
            let l = lines[i];
            let cut = l.len() - l.trim_start().len();
            body.push_str(&l[cut.min(indent)..]);
            body.push('\n');
            i += 1;
        }
        assert!(i < lines.len(), "{file}:{}: fence never closed", start + 1);
        out.push(Block {
            file: file.to_string(),
            line: start + 1,
            info,
            marker,
            body,
        });
        i += 1;
    }
    out
}

pub(super) fn all_blocks() -> Vec<Block> {
    documents()
        .iter()
        .flat_map(|f| {
            let text = std::fs::read_to_string(root().join(f)).expect("read document");
            blocks_of(f, &text)
        })
        .collect()
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Marker {
    SyntaxOnly,
    Filter,
    Output,
}

fn marker(b: &Block) -> Result<Option<Marker>, String> {
    let Some(m) = &b.marker else { return Ok(None) };
    if let Some(why) = m.strip_prefix("syntax-only:") {
        if why.trim().is_empty() {
            return Err("a syntax-only marker must say why the block cannot run here".into());
        }
        return Ok(Some(Marker::SyntaxOnly));
    }
    if m.starts_with("filter:") {
        return Ok(Some(Marker::Filter));
    }
    if m == "output" {
        return Ok(Some(Marker::Output));
    }
    Err(format!("unknown marker <!-- example: {m} -->"))
}

/// How the test ran or checked each kind of block, so that it cannot pass having done nothing.
#[derive(Default, Debug)]
struct Counts {
    shell_run: usize,
    shell_syntax: usize,
    filters: usize,
    cron_lines: usize,
    anacron_lines: usize,
    yaml: usize,
    dockerfile: usize,
    lockrun_checked: usize,
    transcripts: usize,
    outputs_compared: usize,
    output: usize,
}

#[test]
fn every_example_in_the_docs_runs_or_is_checked() {
    let blocks = all_blocks();
    let mut fx = Fixture::new();
    let mut counts = Counts::default();
    let mut failures = Vec::new();
    for b in &blocks {
        if let Err(e) = fx.handle(b, &mut counts) {
            failures.push(format!(
                "{}:{} (```{}):\n{}",
                b.file,
                b.line,
                b.info,
                e.trim_end()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} examples fail:\n\n{}",
        failures.len(),
        blocks.len(),
        failures.join("\n\n")
    );
    eprintln!("{} blocks: {counts:?}", blocks.len());
    assert!(
        counts.shell_run > 0
            && counts.shell_syntax > 0
            && counts.filters > 0
            && counts.cron_lines > 0
            && counts.anacron_lines > 0
            && counts.yaml > 0
            && counts.lockrun_checked > 0
            && counts.transcripts > 0
            && counts.outputs_compared > 0,
        "some kind of example was never exercised: {counts:?}"
    );
}

/// The markers are read where they are written: a marker sits above a fence, never elsewhere.
#[test]
fn extraction_reads_markers_and_indented_fences() {
    let text = "x\n<!-- example: syntax-only: another host -->\n\n```sh\nfoo\n```\n- item:\n\n  ```cron\n  * * * * * a\n  ```\n";
    let b = blocks_of("t.md", text);
    assert_eq!(b.len(), 2);
    assert_eq!((b[0].line, b[0].info.as_str()), (4, "sh"));
    assert_eq!(marker(&b[0]), Ok(Some(Marker::SyntaxOnly)));
    assert_eq!((b[1].line, b[1].body.as_str()), (9, "* * * * * a\n"));
    assert_eq!(marker(&b[1]), Ok(None));
}

/// The servers and files the examples run against.
struct Fixture {
    main: Server,
    /// Three independent masters, for the Redlock examples.
    redlock: Option<Vec<Server>>,
    /// A server that requires a password, for the examples that read a password file.
    password: Option<Server>,
    /// Input for the filter blocks, made once: (all stderr lines, text errors, JSON errors).
    error_lines: Option<(String, Vec<String>, Vec<String>)>,
    /// The last shell block run: its file and what it printed, for an output block below it.
    last_run: Option<(String, Output)>,
    /// The health-check monitor the `--ping` examples' hc-ping.com stands for.
    monitor: Option<Monitor>,
}

const PASSWORD: &str = "doc-example-password";

/// The `--ping` examples' monitor (healthchecks.io's ping host) and the crontab's file that
/// holds such a URL.
const PING_HOST: &str = "https://hc-ping.com/";
const PING_FILE: &str = "/etc/lockrun/report.ping";

/// The servers a block's runs must reach.
#[derive(Clone, Copy)]
enum Reach {
    Main,
    Password,
    Redlock,
}

/// A block's own directory: its stand-in jobs, the log they write, its files.
struct Scratch {
    _dir: tempfile::TempDir,
    /// The block's working directory (relative stand-ins live here).
    work: PathBuf,
    /// Absolute stand-ins.
    bin: PathBuf,
    log: PathBuf,
}

impl Scratch {
    fn new() -> Scratch {
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
    fn runs(&self, job: &str) -> usize {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        log.lines()
            .filter(|l| l.split(' ').next() == Some(job))
            .count()
    }

    /// The PATH an example sees: lockrun first, then the system's.
    fn path(&self) -> String {
        format!(
            "{}:/usr/local/bin:/usr/bin:/bin",
            lockrun_bin().parent().unwrap().display()
        )
    }
}

/// The file name of an absolute stand-in: its whole path, so that two jobs of the same name
/// (`/app/report.sh`, `/usr/local/bin/report.sh`) stay apart.
fn stand_in_name(job: &str) -> String {
    job.trim_start_matches('/').replace('/', "_")
}

fn chmod_x(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

impl Fixture {
    fn new() -> Fixture {
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
    fn flush(&self) {
        let servers = std::iter::once(&self.main)
            .chain(self.redlock.iter().flatten())
            .chain(&self.password);
        for s in servers {
            let _: () = s.cmd(&["FLUSHALL"]);
        }
    }

    /// What a block names that exists only on the reader's machines, and what it becomes here,
    /// with the servers the block's runs must reach. Starts the servers a block needs.
    fn mapping(&mut self, text: &str, scratch: &Scratch) -> (Vec<(String, String)>, Reach) {
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
    fn pings(&self) -> usize {
        self.monitor.as_ref().map_or(0, |m| m.requests().len())
    }

    /// Whether the runs of a block left keys on each server it names.
    fn reached(&self, reach: Reach) -> bool {
        let servers: Vec<&Server> = match reach {
            Reach::Main => vec![&self.main],
            Reach::Password => self.password.iter().collect(),
            Reach::Redlock => self.redlock.iter().flatten().collect(),
        };
        servers.iter().all(|s| !s.keys().is_empty())
    }

    fn handle(&mut self, b: &Block, counts: &mut Counts) -> Result<(), String> {
        let marker = marker(b)?;
        if marker != Some(Marker::Output) {
            // An output block compares with the block right above it, never an older one.
            self.last_run = None;
        }
        match (b.info.as_str(), marker) {
            ("console", None) => {
                counts.transcripts += 1;
                self.run_transcript(b)
            }
            ("", None) if b.body.trim_start().starts_with("$ ") => {
                counts.transcripts += 1;
                self.run_transcript(b)
            }
            ("", Some(Marker::Output)) => {
                counts.outputs_compared += 1;
                self.compare_output(b)
            }
            ("" | "text" | "ini" | "promql", None) => {
                counts.output += 1;
                Ok(())
            }
            ("" | "text" | "ini" | "promql", Some(_)) => {
                Err("a marker on a block that is never run".into())
            }
            ("sh" | "bash" | "shell", None) => {
                counts.shell_run += 1;
                self.run_shell(b)
            }
            ("sh" | "bash" | "shell", Some(Marker::SyntaxOnly)) => {
                counts.shell_syntax += 1;
                check_shell_syntax(&b.body)
            }
            ("sh" | "bash" | "shell", Some(Marker::Filter)) => {
                counts.filters += 1;
                self.run_filters(b)
            }
            ("cron", None) => self.run_cron(b, counts),
            ("anacrontab", None) => self.run_anacrontab(b, counts),
            ("yaml" | "yml", Some(Marker::SyntaxOnly)) => {
                counts.yaml += 1;
                self.check_yaml(b, counts)
            }
            ("dockerfile", Some(Marker::SyntaxOnly)) => {
                counts.dockerfile += 1;
                self.check_dockerfile(b, counts)
            }
            ("yaml" | "yml" | "dockerfile", None) => Err(
                "cannot run here: mark it <!-- example: syntax-only: WHY --> to have it checked"
                    .into(),
            ),
            (info, Some(m)) => Err(format!("{m:?} marker does not apply to ```{info}")),
            (info, None) => Err(format!(
                "no rule for ```{info} blocks: decide in tests/cases/doc_examples.rs"
            )),
        }
    }

    fn run_shell(&mut self, b: &Block) -> Result<(), String> {
        let words: Vec<String> = b.body.lines().flat_map(shell_words).collect();
        if let Some(w) = words.iter().find(|w| NEVER_RUN.contains(&w.as_str())) {
            return Err(format!(
                "not run here ({w}): mark it <!-- example: syntax-only: WHY --> to have it checked"
            ));
        }
        self.flush();
        let scratch = Scratch::new();
        let (map, reach) = self.mapping(&b.body, &scratch);
        let pings_before = self.pings();
        let script = substitute(&b.body, &map);
        let out = Command::new("timeout")
            .args(["60", "bash", "-e", "-c", &script])
            .current_dir(&scratch.work)
            .env_clear()
            .env("PATH", scratch.path())
            .env("HOME", &scratch.work)
            .env("REDIS", self.main.url())
            .env("LOCKRUN_REDIS_URL", self.main.url())
            .stdin(Stdio::null())
            .output()
            .expect("run bash");
        self.last_run = Some((b.file.clone(), out.clone()));
        if !out.status.success() {
            return Err(explain("the block failed", &script, &out));
        }
        for job in STAND_INS.iter().filter(|j| b.body.contains(**j)) {
            if scratch.runs(job) == 0 {
                return Err(explain(&format!("{job} never ran"), &script, &out));
            }
        }
        if b.body.contains("lockrun") && !self.reached(reach) {
            return Err(explain(
                "lockrun never reached the test's server",
                &script,
                &out,
            ));
        }
        if b.body.contains(PING_HOST) && self.pings() == pings_before {
            return Err(explain("no ping reached the monitor", &script, &out));
        }
        Ok(())
    }

    /// A transcript: `$ command` lines, each followed by what it printed. Each command is run
    /// with the key it names held by a job of the test (and one finished run in its history),
    /// as in the transcript; what it prints must match in shape: the same first line of its
    /// report (the table's header, `key:`), the same log lines (level and message; an error
    /// shown is an error printed, and none other), and `echo $?` the same exit code.
    fn run_transcript(&mut self, b: &Block) -> Result<(), String> {
        self.flush();
        let scratch = Scratch::new();
        let (map, _) = self.mapping(&b.body, &scratch);
        let body = substitute(&b.body, &map);
        let mut steps: Vec<(String, Vec<String>)> = Vec::new();
        for line in body.lines() {
            match line.strip_prefix("$ ") {
                Some(cmd) => steps.push((cmd.to_string(), Vec::new())),
                None if !line.trim().is_empty() => steps.last_mut().unwrap().1.push(line.into()),
                None => {}
            }
        }
        let mut holders = Vec::new();
        for (cmd, _) in &steps {
            let words = shell_words(cmd);
            if words.first().map(String::as_str) != Some("lockrun") {
                continue;
            }
            // The key or pattern after the operators' word; a pattern's first match.
            if let Some(key) = words
                .iter()
                .skip(2)
                .find(|w| !w.starts_with('-') && !w.contains(':'))
            {
                let key = key.replace('*', "eu");
                if !self.main.exists(&key) {
                    holders.push(self.hold(&key, &scratch));
                }
            }
        }
        let result = self.transcript_steps(&steps, &scratch);
        for mut h in holders {
            // SIGTERM, not SIGKILL: lockrun passes it on to its job's process group and
            // releases, so no `sleep` outlives the test.
            crate::support::kill(h.id(), libc::SIGTERM);
            let _ = h.wait();
        }
        result
    }

    /// A job of the test holding `key` (after one finished run of it, for the history).
    fn hold(&self, key: &str, scratch: &Scratch) -> std::process::Child {
        let lockrun = |args: &[&str]| {
            let mut c = Command::new(lockrun_bin());
            c.args(["-r", &self.main.url(), key, "--"])
                .args(args)
                .env_clear()
                .env("PATH", "/usr/bin:/bin")
                .current_dir(&scratch.work)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            c
        };
        let done = lockrun(&["true"]).status().expect("run lockrun");
        assert!(done.success(), "a run of {key}: {done}");
        let child = lockrun(&["sleep", "60"]).spawn().expect("start lockrun");
        self.main
            .wait_until(&format!("{key} held"), |s| s.exists(key));
        child
    }

    fn transcript_steps(
        &self,
        steps: &[(String, Vec<String>)],
        scratch: &Scratch,
    ) -> Result<(), String> {
        let mut last: Option<i32> = None;
        for (cmd, shown) in steps {
            if cmd.trim() == "echo $?" {
                let want = shown.first().map(String::as_str).unwrap_or_default();
                if last.map(|c| c.to_string()).as_deref() != Some(want) {
                    return Err(format!(
                        "`$ {cmd}` shows {want}, the command exited {last:?}"
                    ));
                }
                continue;
            }
            let out = Command::new("timeout")
                .args(["60", "bash", "-c", cmd])
                .current_dir(&scratch.work)
                .env_clear()
                .env("PATH", scratch.path())
                .env("HOME", &scratch.work)
                .env("LOCKRUN_REDIS_URL", self.main.url())
                .stdin(Stdio::null())
                .output()
                .expect("run bash");
            last = out.status.code();
            let stdout = String::from_utf8_lossy(&out.stdout);
            let stderr = String::from_utf8_lossy(&out.stderr);
            let fail = |what: String| Err(explain(&format!("`$ {cmd}`: {what}"), cmd, &out));
            let shown_report: Vec<&String> =
                shown.iter().filter(|l| log_line(l).is_none()).collect();
            if let Some(first) = shown_report.first() {
                let got = stdout.lines().next().unwrap_or_default();
                if squeeze(got) != squeeze(first) {
                    return fail(format!("its report should begin like {first:?}"));
                }
            }
            let printed: Vec<(String, String)> = stderr.lines().filter_map(log_line).collect();
            for want in shown.iter().filter_map(|l| log_line(l)) {
                if !printed.contains(&want) {
                    return fail(format!("no {} line {:?}", want.0, want.1));
                }
            }
            let shows_error = shown
                .iter()
                .any(|l| log_line(l).is_some_and(|(level, _)| level == "ERROR"));
            if !shows_error && printed.iter().any(|(level, _)| level == "ERROR") {
                return fail("an error the transcript does not show".into());
            }
        }
        Ok(())
    }

    /// An output block (marked `output`) below the shell block that prints it: each log line
    /// shown (level and message) is printed at least as many times as shown, and a table's
    /// header shown is printed as the header of a table.
    fn compare_output(&self, b: &Block) -> Result<(), String> {
        let Some((file, out)) = self.last_run.as_ref().filter(|(f, _)| *f == b.file) else {
            return Err("an output block, but no shell block of this file was run above it".into());
        };
        let printed: Vec<(String, String)> = String::from_utf8_lossy(&out.stderr)
            .lines()
            .filter_map(log_line)
            .collect();
        let shown: Vec<(String, String)> = b.body.lines().filter_map(log_line).collect();
        for want in &shown {
            let n_shown = shown.iter().filter(|l| *l == want).count();
            let n_printed = printed.iter().filter(|l| *l == want).count();
            if n_printed < n_shown {
                return Err(explain(
                    &format!(
                        "shows {n_shown} {} line(s) {:?}, the block above ({file}) printed {n_printed}",
                        want.0, want.1
                    ),
                    "(the block above)",
                    out,
                ));
            }
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        for header in b.body.lines().filter(|l| is_table_header(l)) {
            if !stdout.lines().any(|l| squeeze(l) == squeeze(header)) {
                return Err(explain(
                    &format!("shows the header {header:?}, which the block above never printed"),
                    "(the block above)",
                    out,
                ));
            }
        }
        Ok(())
    }

    fn run_cron(&mut self, b: &Block, counts: &mut Counts) -> Result<(), String> {
        let mut vars: Vec<(String, String)> = Vec::new();
        for (n, line) in b.body.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let at = format!("line {}", b.line + 1 + n);
            let (schedule, command) = match cron_entry(line) {
                Some(entry) => entry,
                None => {
                    let Some((name, value)) = line.split_once('=') else {
                        return Err(format!("{at}: neither a variable nor an entry: {line}"));
                    };
                    let name = name.trim();
                    if name != "SHELL" && name != "MAILTO" {
                        return Err(format!(
                            "{at}: {name}= reaches the jobs of Debian's cron and cronie, but not \
                             those of busybox crond (Alpine's cron), which passes only SHELL= \
                             and MAILTO=: give it on the line (an option such as -r, or a \
                             `NAME=value` before the command)"
                        ));
                    }
                    let value = value.trim().trim_matches('"').trim_matches('\'');
                    vars.push((name.to_string(), value.to_string()));
                    continue;
                }
            };
            if !valid_schedule(&schedule) {
                return Err(format!("{at}: not a cron schedule: {schedule}"));
            }
            counts.cron_lines += 1;
            self.run_cron_command(b, &at, &vars, &command)?;
        }
        Ok(())
    }

    fn run_anacrontab(&mut self, b: &Block, counts: &mut Counts) -> Result<(), String> {
        let mut vars: Vec<(String, String)> = Vec::new();
        for (n, line) in b.body.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let at = format!("line {}", b.line + 1 + n);
            let Some(command) = anacron_entry(line) else {
                let Some((name, value)) = line.split_once('=') else {
                    return Err(format!("{at}: neither a variable nor a job: {line}"));
                };
                let value = value.trim().trim_matches('"').trim_matches('\'');
                vars.push((name.trim().to_string(), value.to_string()));
                continue;
            };
            counts.anacron_lines += 1;
            self.run_cron_command(b, &at, &vars, &command)?;
        }
        Ok(())
    }

    fn run_cron_command(
        &mut self,
        b: &Block,
        at: &str,
        vars: &[(String, String)],
        command: &str,
    ) -> Result<(), String> {
        self.flush();
        let scratch = Scratch::new();
        let (map, reach) = self.mapping(&b.body, &scratch);
        let pings_before = self.pings();
        let command = substitute(command, &map);
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.clone(), substitute(v, &map)))
            .collect();
        // lockrun where `cargo install` puts it: found only through the line's own PATH.
        let cargo_bin = scratch.work.join(".cargo/bin");
        std::fs::create_dir_all(&cargo_bin).unwrap();
        std::os::unix::fs::symlink(lockrun_bin(), cargo_bin.join("lockrun")).unwrap();
        // cron's environment: HOME, LOGNAME, SHELL, its PATH, and the crontab's variables.
        // Without HOME: a service that reuses the line (runit gives none).
        let run_with = |home: bool| {
            let mut cmd = Command::new("timeout");
            cmd.env_clear();
            if home {
                cmd.env("HOME", &scratch.work);
            }
            cmd.args(["60", "sh", "-c", &command])
                .current_dir(&scratch.work)
                .env("PATH", "/usr/bin:/bin")
                .env("LOGNAME", "root")
                .env("SHELL", "/bin/sh")
                .envs(vars.iter().map(|(k, v)| (k, v)))
                .stdin(Stdio::null())
                .output()
                .expect("run sh")
        };
        let run = || run_with(true);
        let words: Vec<&str> = command.split_whitespace().collect();
        let quiet = words.contains(&"-q");
        let conflict_code = if words.windows(2).any(|w| w == ["-E", "0"]) {
            0
        } else {
            75
        };
        let first = run();
        if first.status.code() != Some(0) || (quiet && !first.stderr.is_empty()) {
            return Err(explain(
                &format!("{at}: the run should exit 0 (silently under -q)"),
                &command,
                &first,
            ));
        }
        let jobs: Vec<&&str> = STAND_INS.iter().filter(|j| b.body.contains(**j)).collect();
        for job in &jobs {
            if scratch.runs(job) != 1 {
                return Err(explain(
                    &format!(
                        "{at}: {job} did not run once; its log: {:?}",
                        std::fs::read_to_string(&scratch.log)
                    ),
                    &command,
                    &first,
                ));
            }
        }
        if !self.reached(reach) {
            return Err(explain(
                &format!("{at}: lockrun never reached the test's server"),
                &command,
                &first,
            ));
        }
        if (command.contains("--ping") || command.contains("LOCKRUN_PING"))
            && self.pings() == pings_before
        {
            return Err(explain(
                &format!("{at}: no ping reached the monitor"),
                &command,
                &first,
            ));
        }
        if let Some(i) = words.iter().position(|w| *w == "--metrics-file") {
            let file = words.get(i + 1).copied().unwrap_or_default();
            if !Path::new(file).is_file() {
                return Err(format!("{at}: no metrics file {file} after the run"));
            }
        }
        if command.contains("$HOME/.cargo/bin") {
            // The README's word for a service without HOME: the prefix names /.cargo/bin.
            let homeless = run_with(false);
            let err = String::from_utf8_lossy(&homeless.stderr);
            if homeless.status.code() != Some(127) || !err.contains("lockrun: not found") {
                return Err(explain(
                    &format!(
                        "{at}: without HOME, $HOME/.cargo/bin is /.cargo/bin and lockrun (a cargo \
                         install here) should not be found, exit 127"
                    ),
                    &command,
                    &homeless,
                ));
            }
        }
        if words.contains(&"--every") || words.contains(&"--min-hold") {
            // The next host to fire this tick.
            let second = run();
            if second.status.code() != Some(conflict_code) || (quiet && !second.stderr.is_empty()) {
                return Err(explain(
                    &format!(
                        "{at}: a second run in the same tick should skip, exit {conflict_code} (silently under -q)"
                    ),
                    &command,
                    &second,
                ));
            }
            for job in &jobs {
                if scratch.runs(job) != 1 {
                    return Err(format!("{at}: {job} ran twice in one tick"));
                }
            }
        }
        Ok(())
    }

    /// What lockrun writes on stderr, errors and not, in both formats.
    fn error_lines(&mut self) -> (String, Vec<String>, Vec<String>) {
        if let Some(e) = &self.error_lines {
            return e.clone();
        }
        let runs: &[&[&str]] = &[
            &["-r", &self.main.url(), "doc-filter", "--", "true"],
            &["--no-such-flag", "doc-filter", "--", "true"],
            &["--ttl", "soon", "doc-filter", "--", "true"],
            &["-r", "redis://127.0.0.1:1", "doc-filter", "--", "true"],
            &["-r", "http://x", "doc-filter", "--", "true"],
            &[
                "-r",
                &self.main.url(),
                "doc-filter",
                "--",
                "/nonexistent/job",
            ],
        ];
        let mut all = String::new();
        for format in ["text", "json"] {
            for args in runs {
                let out = Command::new(lockrun_bin())
                    .args(*args)
                    .env_clear()
                    .env("PATH", "/usr/bin:/bin")
                    .env("LOCKRUN_LOG_FORMAT", format)
                    .stdin(Stdio::null())
                    .output()
                    .expect("run lockrun");
                all.push_str(&String::from_utf8_lossy(&out.stderr));
            }
        }
        let mut text = Vec::new();
        let mut json = Vec::new();
        for line in all.lines() {
            if line.starts_with('{') {
                let v: serde_json::Value = serde_json::from_str(line)
                    .unwrap_or_else(|e| panic!("lockrun wrote a bad JSON line {line:?}: {e}"));
                if v["level"] == "ERROR" {
                    json.push(line.to_string());
                }
            } else if line.split_whitespace().nth(1) == Some("ERROR") {
                text.push(line.to_string());
            }
        }
        assert!(
            text.len() >= 4 && json.len() >= 4,
            "the failing runs should each write an error line:\n{all}"
        );
        self.error_lines = Some((all, text, json));
        self.error_lines.clone().unwrap()
    }

    fn run_filters(&mut self, b: &Block) -> Result<(), String> {
        let (input, text, json) = self.error_lines();
        for line in b.body.lines().filter(|l| !l.trim().is_empty()) {
            let mut child = Command::new("bash")
                .args(["-c", line])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("run filter");
            use std::io::Write;
            child
                .stdin
                .take()
                .unwrap()
                .write_all(input.as_bytes())
                .unwrap();
            let out = child.wait_with_output().unwrap();
            let got: Vec<String> = String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(String::from)
                .collect();
            if got != text && got != json {
                return Err(explain(
                    &format!(
                        "should print exactly the error lines of one format; the input was:\n{input}"
                    ),
                    line,
                    &out,
                ));
            }
        }
        Ok(())
    }

    fn check_yaml(&mut self, b: &Block, counts: &mut Counts) -> Result<(), String> {
        let doc: serde_yaml_ng::Value =
            serde_yaml_ng::from_str(&b.body).map_err(|e| format!("not YAML: {e}"))?;
        for (file, copy) in COPIES.iter().filter(|(f, _)| *f == b.file) {
            let shipped = std::fs::read_to_string(root().join(copy)).unwrap();
            let shipped: String = shipped
                .lines()
                .skip_while(|l| l.starts_with('#'))
                .map(|l| format!("{l}\n"))
                .collect();
            if b.info.starts_with("yaml") && shipped != b.body {
                return Err(format!("{file}'s block is no longer the same as {copy}"));
            }
        }
        let mut env = Vec::new();
        collect_env(&doc, &mut env);
        let defined: BTreeSet<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
        let mut lines = Vec::new();
        collect_shell_lines(&doc, &mut lines);
        for line in &lines {
            check_shell_syntax(line)?;
            for var in variables_used(line) {
                if !defined.contains(var.as_str()) {
                    return Err(format!(
                        "`{line}` uses ${var}, which the example does not define"
                    ));
                }
            }
            let words = shell_words(line);
            match words.first().map(String::as_str) {
                Some("lockrun") => {
                    counts.lockrun_checked += 1;
                    self.check_lockrun_args(&words[1..], &env)
                        .map_err(|e| format!("`{line}`: {e}"))?;
                }
                Some("cargo") if words.get(1).map(String::as_str) == Some("install") => {
                    check_cargo_install(&words).map_err(|e| format!("`{line}`: {e}"))?;
                }
                _ => {}
            }
        }
        let mut commands = Vec::new();
        collect_commands(&doc, &mut commands);
        for argv in &commands {
            counts.lockrun_checked += 1;
            self.check_lockrun_args(&argv[1..], &env)
                .map_err(|e| format!("command {argv:?}: {e}"))?;
        }
        for path in repo_paths(&b.body) {
            if !root().join(&path).exists() {
                return Err(format!("names {path}, which is not in the repository"));
            }
        }
        Ok(())
    }

    fn check_dockerfile(&mut self, b: &Block, counts: &mut Counts) -> Result<(), String> {
        const INSTRUCTIONS: &[&str] = &[
            "FROM",
            "COPY",
            "ADD",
            "CMD",
            "ENTRYPOINT",
            "RUN",
            "ENV",
            "ARG",
            "WORKDIR",
            "USER",
        ];
        let image = std::fs::read_to_string(root().join("packaging/Dockerfile")).unwrap();
        for line in b.body.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (instruction, rest) = line.split_once(' ').unwrap_or((line, ""));
            if !INSTRUCTIONS.contains(&instruction) {
                return Err(format!("not a Dockerfile instruction: {line}"));
            }
            let words: Vec<&str> = rest.split_whitespace().collect();
            if instruction == "COPY" && words.first() == Some(&"--from=lockrun") {
                let src = words.get(1).copied().unwrap_or_default();
                if !image
                    .lines()
                    .any(|l| !l.starts_with('#') && l.contains(src))
                {
                    return Err(format!("lockrun's image has no {src}"));
                }
            }
            if instruction == "CMD" {
                let argv: Vec<String> = serde_json::from_str(rest)
                    .map_err(|e| format!("CMD is not a JSON list: {e}"))?;
                counts.lockrun_checked += 1;
                self.check_lockrun_args(&argv, &[])
                    .map_err(|e| format!("CMD {argv:?} as lockrun's arguments: {e}"))?;
            }
        }
        Ok(())
    }

    /// Runs lockrun with an example's arguments and `LOCKRUN_*` variables against the test's
    /// server, the job (everything after the first `--`) replaced by `true`: the options must
    /// parse and the run must say nothing beyond taking and releasing the lock (a warning on
    /// every run, such as a `--kill-after` above TTL/3, is a bad example).
    fn check_lockrun_args(
        &mut self,
        args: &[String],
        env: &[(String, String)],
    ) -> Result<(), String> {
        let Some(dashes) = args.iter().position(|a| a == "--") else {
            return Err("no `--` between the key and the command".into());
        };
        self.flush();
        let mut cmd = Command::new(lockrun_bin());
        cmd.args(&args[..=dashes])
            .arg("true")
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .stdin(Stdio::null());
        for (k, v) in env.iter().filter(|(k, _)| k.starts_with("LOCKRUN_")) {
            cmd.env(k, v);
        }
        // Every example's Redis is a secret of the reader's: here, the test's server.
        cmd.env("LOCKRUN_REDIS_URL", self.main.url());
        let out = cmd.output().expect("run lockrun");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let expected = ["redis lock acquired, starting job", "redis lock released"];
        let unexpected: Vec<&str> = stderr
            .lines()
            .filter(|l| !expected.iter().any(|e| l.contains(e)))
            .collect();
        if out.status.code() != Some(0) || !unexpected.is_empty() {
            return Err(explain(
                "lockrun with these arguments",
                &format!("{cmd:?}"),
                &out,
            ));
        }
        Ok(())
    }
}

/// A log line's level and message (the words before its first `field=`), or None.
fn log_line(line: &str) -> Option<(String, String)> {
    let mut words = line.split_whitespace();
    words.next()?;
    let level = words.next()?;
    if !["INFO", "WARN", "ERROR"].contains(&level) {
        return None;
    }
    let message: Vec<&str> = words.take_while(|w| !w.contains('=')).collect();
    Some((level.to_string(), message.join(" ")))
}

/// A table's header: several words, all capitals.
fn is_table_header(line: &str) -> bool {
    let words: Vec<&str> = line.split_whitespace().collect();
    words.len() >= 3
        && words
            .iter()
            .all(|w| w.chars().all(|c| c.is_ascii_uppercase()))
}

fn squeeze(line: &str) -> String {
    line.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `text` with each mapped name replaced.
fn substitute(text: &str, map: &[(String, String)]) -> String {
    map.iter().fold(text.to_string(), |t, (from, to)| {
        t.replace(from.as_str(), to)
    })
}

fn explain(what: &str, script: &str, out: &Output) -> String {
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

/// A crontab entry's schedule and command: five time fields or an `@` nickname, then the rest.
fn cron_entry(line: &str) -> Option<(String, String)> {
    let first = line.split_whitespace().next()?;
    if first.contains('=') {
        return None;
    }
    let n = if first.starts_with('@') { 1 } else { 5 };
    let mut rest = line;
    let mut fields = Vec::new();
    for _ in 0..n {
        let t = rest.trim_start();
        let end = t.find(char::is_whitespace)?;
        fields.push(&t[..end]);
        rest = &t[end..];
    }
    Some((fields.join(" "), rest.trim().to_string()))
}

/// An anacrontab job's command: after a period (days, or `@monthly`, `@weekly`, `@daily`),
/// a delay (minutes) and a job name. `None` for anything else (a variable).
fn anacron_entry(line: &str) -> Option<String> {
    let mut rest = line;
    let mut fields = Vec::new();
    for _ in 0..3 {
        let t = rest.trim_start();
        let end = t.find(char::is_whitespace)?;
        fields.push(&t[..end]);
        rest = &t[end..];
    }
    let period = fields[0].chars().all(|c| c.is_ascii_digit())
        || ["@monthly", "@weekly", "@daily"].contains(&fields[0]);
    let delay = fields[1].chars().all(|c| c.is_ascii_digit());
    (period && delay && !fields[2].contains('=')).then(|| rest.trim().to_string())
}

fn valid_schedule(schedule: &str) -> bool {
    const NICKNAMES: &[&str] = &[
        "@reboot",
        "@yearly",
        "@annually",
        "@monthly",
        "@weekly",
        "@daily",
        "@midnight",
        "@hourly",
    ];
    if schedule.starts_with('@') {
        return NICKNAMES.contains(&schedule);
    }
    schedule.split(' ').all(|f| {
        f.chars()
            .all(|c| c.is_ascii_alphanumeric() || "*/,-".contains(c))
    })
}

/// `bash -n`, then: every command exists, every repository path exists.
fn check_shell_syntax(script: &str) -> Result<(), String> {
    let out = Command::new("bash")
        .args(["-n", "-c", script])
        .output()
        .expect("bash -n");
    if !out.status.success() {
        return Err(explain("bash -n", script, &out));
    }
    for line in script.lines() {
        let words = shell_words(line);
        let command = words
            .iter()
            .map(String::as_str)
            .find(|w| !is_assignment(w) && *w != "sudo");
        let Some(command) = command else { continue };
        let known = command == "lockrun"
            || STAND_INS.contains(&command)
            || OUTSIDE_TOOLS.contains(&command)
            || root().join(command).is_file()
            || Command::new("bash")
                .args(["-c", "command -v \"$1\" >/dev/null", "-", command])
                .status()
                .expect("bash")
                .success();
        if !known {
            return Err(format!("`{line}`: no command {command}"));
        }
    }
    for path in repo_paths(script) {
        if !root().join(&path).exists() {
            return Err(format!("names {path}, which is not in the repository"));
        }
    }
    Ok(())
}

/// `NAME=value`, a variable for the command that follows.
fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// The words of a shell line up to a comment, quotes removed (enough for the docs' lines:
/// no escapes, no expansions checked here).
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    for c in line.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => word.push(c),
            None if c == '\'' || c == '"' => {
                quote = Some(c);
                in_word = true;
            }
            None if c == '#' && !in_word => break,
            None if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            None => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

/// The repository paths a text names (under the repository's own top-level directories).
fn repo_paths(text: &str) -> Vec<String> {
    const TOP: &[&str] = &["tests/", "packaging/", "docs/", "src/", "examples/"];
    text.split(|c: char| c.is_whitespace() || "\"'()$=,;`".contains(c))
        .filter(|w| TOP.iter().any(|t| w.starts_with(t)))
        .map(|w| w.trim_end_matches(['.', ':']).to_string())
        .collect()
}

/// The `$NAME` and `${NAME}` a shell line expands.
fn variables_used(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(i) = rest.find('$') {
        rest = &rest[i + 1..];
        let name: String = rest
            .trim_start_matches('{')
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if !name.is_empty() {
            out.push(name);
        }
    }
    out
}

/// `cargo install` of this package, reproducibly (`--locked`: the repository's Cargo.lock).
fn check_cargo_install(words: &[String]) -> Result<(), String> {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let package = manifest
        .lines()
        .find_map(|l| l.strip_prefix("name = "))
        .map(|n| n.trim_matches('"'))
        .unwrap();
    if words.last().map(String::as_str) != Some(package) {
        return Err(format!("does not install the package {package}"));
    }
    if !words.iter().any(|w| w == "--locked") {
        return Err("without --locked it builds with other dependencies than tested".into());
    }
    // `--locked` needs the lock file committed beside the manifest.
    if !root().join("Cargo.lock").is_file() {
        return Err("--locked needs Cargo.lock at the repository's root".into());
    }
    Ok(())
}

fn yaml_string(v: &serde_yaml_ng::Value) -> Option<String> {
    match v {
        serde_yaml_ng::Value::String(s) => Some(s.clone()),
        serde_yaml_ng::Value::Number(n) => Some(n.to_string()),
        serde_yaml_ng::Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Every variable an example defines: `env:`/`variables:` mappings (Actions, GitLab) and
/// `env:` lists of `name`/`value` (Kubernetes). A value from a secret (`${{ secrets.… }}`,
/// `valueFrom`) is defined but has no value here.
fn collect_env(v: &serde_yaml_ng::Value, out: &mut Vec<(String, String)>) {
    match v {
        serde_yaml_ng::Value::Mapping(m) => {
            for (k, val) in m {
                let key = k.as_str().unwrap_or_default();
                match (key, val) {
                    ("env" | "variables", serde_yaml_ng::Value::Mapping(vars)) => {
                        for (name, value) in vars {
                            let value = yaml_string(value).unwrap_or_default();
                            let value = if value.contains("${{") {
                                String::new()
                            } else {
                                value
                            };
                            out.push((name.as_str().unwrap_or_default().to_string(), value));
                        }
                    }
                    ("env", serde_yaml_ng::Value::Sequence(list)) => {
                        for item in list {
                            let name = item["name"].as_str().unwrap_or_default().to_string();
                            let value = yaml_string(&item["value"]).unwrap_or_default();
                            out.push((name, value));
                        }
                    }
                    _ => collect_env(val, out),
                }
            }
        }
        serde_yaml_ng::Value::Sequence(s) => s.iter().for_each(|x| collect_env(x, out)),
        _ => {}
    }
}

/// The shell lines an example runs: Actions' `run:`, GitLab's `script:` and friends.
fn collect_shell_lines(v: &serde_yaml_ng::Value, out: &mut Vec<String>) {
    match v {
        serde_yaml_ng::Value::Mapping(m) => {
            for (k, val) in m {
                match (k.as_str().unwrap_or_default(), val) {
                    ("run", serde_yaml_ng::Value::String(s)) => {
                        out.extend(s.lines().map(String::from))
                    }
                    (
                        "script" | "before_script" | "after_script",
                        serde_yaml_ng::Value::Sequence(l),
                    ) => out.extend(l.iter().filter_map(yaml_string)),
                    _ => collect_shell_lines(val, out),
                }
            }
        }
        serde_yaml_ng::Value::Sequence(s) => s.iter().for_each(|x| collect_shell_lines(x, out)),
        _ => {}
    }
}

/// A container's `command:` (and `args:`) that runs lockrun.
fn collect_commands(v: &serde_yaml_ng::Value, out: &mut Vec<Vec<String>>) {
    match v {
        serde_yaml_ng::Value::Mapping(m) => {
            if let Some(serde_yaml_ng::Value::Sequence(c)) = m.get("command") {
                let mut argv: Vec<String> = c.iter().filter_map(yaml_string).collect();
                if let Some(serde_yaml_ng::Value::Sequence(a)) = m.get("args") {
                    argv.extend(a.iter().filter_map(yaml_string));
                }
                if argv.first().map(String::as_str) == Some("lockrun") {
                    out.push(argv);
                }
            }
            m.values().for_each(|x| collect_commands(x, out));
        }
        serde_yaml_ng::Value::Sequence(s) => s.iter().for_each(|x| collect_commands(x, out)),
        _ => {}
    }
}
