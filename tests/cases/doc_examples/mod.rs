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
//!
//! One file per kind of block: `shell.rs` (shell blocks, run, syntax-only or filters),
//! `transcript.rs` (transcripts and output blocks), `cron.rs` (`cron` and `anacrontab`),
//! `yaml.rs` (`yaml`, and an example's lockrun arguments run, for `dockerfile.rs` too),
//! `dockerfile.rs`. What they share (the servers, the stand-ins, the mapping) is
//! `fixture.rs`; the blocks and their markers are read by `support::doc_blocks`.

mod cron;
mod dockerfile;
mod fixture;
mod shell;
mod transcript;
mod yaml;

use crate::support::doc_blocks::{all_blocks, blocks_of, marker, Block, Marker};
use fixture::Fixture;
use shell::check_shell_syntax;
use std::path::PathBuf;

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

impl Fixture {
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
                "no rule for ```{info} blocks: decide in tests/cases/doc_examples/mod.rs"
            )),
        }
    }
}
