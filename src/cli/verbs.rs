//! The operators' commands: `lockrun status|list|release|history|doctor …`.
//!
//! They take the run form's connection and logging options (and environment variables), so the
//! same crontab line or manifest environment that runs a job can inspect its lock. They are
//! subcommands of [`super::command`].

use super::{parse_key, Connection, Logs};

/// An empty pattern matches no key: said, rather than an empty list that looks like no locks.
fn parse_pattern(s: &str) -> Result<String, String> {
    if s.is_empty() {
        return Err(
            "an empty pattern matches no key: leave it out (or give '*') to list every lock".into(),
        );
    }
    Ok(s.to_string())
}

#[derive(Debug, clap::Subcommand)]
pub enum Verb {
    /// Who holds KEY, since when, its TTL, fence and queue. Exit 0 held, 1 free, 69 unavailable
    Status(Status),
    /// Every lockrun lock (held, or --all: every key lockrun has locked), sorted by key
    List(List),
    /// Delete a stuck lock (needs --force); logs what was deleted. Exit 0 deleted, 1 no lock, 64 without --force
    Release(Release),
    /// The last runs under KEY, newest first: when, host, pid, fence, outcome
    History(History),
    /// Check a Redis server for lock safety, one line per finding. Exit 0 fine, 1 not
    Doctor(Doctor),
}

/// What every operator's command shares.
#[derive(Debug, clap::Args)]
pub struct Common {
    #[command(flatten)]
    pub conn: Connection,

    /// Print one JSON document on stdout instead of text
    #[arg(long)]
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

    /// Also keys that are free now but were locked in the last 40 days (their fencing counter
    /// remains that long)
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

    /// Really delete it: a holder still running loses the lock at its next renewal (its job
    /// is stopped and it exits 76)
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
