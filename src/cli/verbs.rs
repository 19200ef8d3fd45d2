//! The operators' commands: `lockrun status|list|release|history|doctor …`.
//!
//! They take the run form's connection and logging options (and environment variables), so the
//! same crontab line or manifest environment that runs a job can inspect its lock. They are
//! subcommands of [`super::command`].

use super::options::{parse_key, OUTPUT};
use super::{Connection, Logs};
use crate::exit_codes::ExitCode;

/// An empty pattern matches no key: said, rather than an empty list that looks like no locks.
fn parse_pattern(s: &str) -> Result<String, String> {
    if s.is_empty() {
        return Err(
            "an empty pattern matches no key: leave it out (or give '*') to list every lock".into(),
        );
    }
    Ok(s.to_string())
}

/// A command's exit codes, then those every command shares: a usage error (for these commands
/// also a key that is not a lockrun lock) and Redis unavailable.
fn exit_codes(own: &str) -> String {
    format!(
        "Exit codes: {own}; {}, or a key that is not a lockrun lock; {}.",
        ExitCode::Usage.summary().briefly(),
        ExitCode::Unavailable.summary().briefly()
    )
}

#[derive(Debug, clap::Subcommand)]
pub enum Verb {
    /// Who holds KEY, since when, its TTL, fence and queue
    #[command(after_help = exit_codes("0 held, 1 free"))]
    Status(Status),
    /// Every held lock, sorted by key (--all: also free ones)
    #[command(after_help = exit_codes("0 (also when none)"))]
    List(List),
    /// Delete a stuck lock (needs --force); logs what was deleted
    #[command(after_help = exit_codes("0 deleted, 1 no lock"))]
    Release(Release),
    /// The last runs of KEY, newest first: when, host, pid, fence, outcome
    #[command(after_help = exit_codes("0 (also when none)"))]
    History(History),
    /// Check a Redis server for lock safety, one line per finding
    #[command(after_help = exit_codes("0 fine, 1 a finding is warn or fail"))]
    Doctor(Doctor),
}

/// A command's help flag, and what the run form's shared options say that is not true of a
/// command: its `-q` has no `-E` to pair with, its requests no TTL to fit in.
pub(super) fn for_a_verb(cmd: clap::Command) -> clap::Command {
    // Off here as well as on the whole command (where it is global), so that a command taken
    // alone (its man page) still has one help flag.
    cmd.disable_help_flag(true)
        .arg(super::help::help_flag())
        .mut_arg("quiet", |a| {
            a.long_help("Print errors only\n\nLOCKRUN_QUIET yields to -v.")
        })
        .mut_arg("node_timeout", |a| {
            a.help("Bound on each Redis request (default 3s)")
                .long_help(None::<&str>)
        })
}

/// What every operator's command shares.
#[derive(Debug, clap::Args)]
pub struct Common {
    #[command(flatten)]
    pub conn: Connection,

    /// Print one JSON document on stdout instead of text
    #[arg(long, help_heading = OUTPUT)]
    pub json: bool,

    #[command(flatten)]
    pub logs: Logs,
}

#[derive(Debug, clap::Args)]
pub struct Status {
    /// Lock name
    #[arg(value_name = "KEY", value_parser = parse_key)]
    pub key: String,

    #[command(flatten)]
    pub common: Common,
}

#[derive(Debug, clap::Args)]
pub struct List {
    /// Only locks whose name matches this glob (Redis MATCH syntax: * ? [abc] \x)
    #[arg(value_name = "PATTERN", default_value = "*", value_parser = parse_pattern)]
    pub pattern: String,

    /// Also free keys lockrun has locked in the last 40 days
    ///
    /// Their fencing counter remains that long.
    #[arg(long)]
    pub all: bool,

    #[command(flatten)]
    pub common: Common,
}

#[derive(Debug, clap::Args)]
pub struct Release {
    /// Lock name
    #[arg(value_name = "KEY", value_parser = parse_key)]
    pub key: String,

    /// Really delete it, even if a holder still runs
    ///
    /// A holder still running loses the lock at its next renewal (its job is stopped and it
    /// exits 76).
    #[arg(long)]
    pub force: bool,

    #[command(flatten)]
    pub common: Common,
}

#[derive(Debug, clap::Args)]
pub struct History {
    /// Lock name
    #[arg(value_name = "KEY", value_parser = parse_key)]
    pub key: String,

    /// How many runs to show at most
    #[arg(short = 'n', long, default_value_t = 20, value_name = "N")]
    pub count: u32,

    #[command(flatten)]
    pub common: Common,
}

#[derive(Debug, clap::Args)]
pub struct Doctor {
    /// A lock name whose Cluster slot to report (optional)
    #[arg(value_name = "KEY", value_parser = parse_key)]
    pub key: Option<String>,

    #[command(flatten)]
    pub common: Common,
}

impl Verb {
    pub fn common(&self) -> &Common {
        match self {
            Verb::Status(v) => &v.common,
            Verb::List(v) => &v.common,
            Verb::Release(v) => &v.common,
            Verb::History(v) => &v.common,
            Verb::Doctor(v) => &v.common,
        }
    }

    pub fn common_mut(&mut self) -> &mut Common {
        match self {
            Verb::Status(v) => &mut v.common,
            Verb::List(v) => &mut v.common,
            Verb::Release(v) => &mut v.common,
            Verb::History(v) => &mut v.common,
            Verb::Doctor(v) => &mut v.common,
        }
    }
}
