//! Which form a line is, and its one parse: a run (`lockrun [OPTIONS] KEY COMMAND…`, or
//! `lockrun run …` for a lock named like a command) or an operators' command
//! (`lockrun [OPTIONS] status KEY`).
//!
//! clap takes a subcommand only as the first word, while a run's KEY and COMMAND can be any
//! word. So the line's first word that is neither an option nor an option's value decides
//! ([`scan`](super::words::scan) reads the line by the definition's own arguments: which take a value): the name of
//! a command makes the line that command, the word moved to the front so the shared options
//! may come before it as well as after; any other word is a run's KEY.
//!
//! A run is read by the run form's own definition alone ([`Args`]), without the subcommands
//! (each a copy of the connection and log options) and their help texts: a run does not need
//! them and every cron tick would pay to build them (docs/benchmarks.md); its usage errors are
//! said from that parse. A command, `run`, help and version are read and said by the whole
//! [`command`]; a line with no command word parses to the same [`Args`] either way.

use super::said::said;
use super::words::scan;
use super::{command, verbs, Args, Invocation};
use crate::exit_codes::ExitCode;
use clap::{CommandFactory, FromArgMatches};
use std::ffi::OsString;

/// The line (the program's name first), parsed; help, version and errors already said.
pub(super) fn parse_from(argv: Vec<OsString>) -> Result<Invocation, ExitCode> {
    let mut run = without_empty_env(Args::command());
    if let Some(at) = command_word(&run, &argv) {
        return whole(argv, Some(at));
    }
    match run
        .try_get_matches_from_mut(&argv)
        .and_then(|m| run_from(&m))
    {
        Ok(run) => Ok(run),
        // Help and version are the whole command's to say: its commands, its two tiers.
        Err(e) if !e.use_stderr() => whole(argv, None),
        Err(e) => Err(said(&run, e, &argv)),
    }
}

/// Where the line's command word is, if its first word that is not an option names one of
/// [`command`]'s subcommands. `run` is the run form's definition ([`Args`]), which has the same
/// options before that word as the whole command.
pub(super) fn command_word(run: &clap::Command, argv: &[OsString]) -> Option<usize> {
    use clap::Subcommand as _;
    let at = scan(run, argv, 1, |_, _| ())?;
    let word = argv[at].to_str()?;
    (word == "run" || verbs::Verb::has_subcommand(word)).then_some(at)
}

/// The line read by the whole [`command`]: a command's (`at`: where its word is), or a run's
/// help or version.
pub(super) fn whole(mut argv: Vec<OsString>, at: Option<usize>) -> Result<Invocation, ExitCode> {
    let mut cmd = without_empty_env(command());
    if let Some(at) = at {
        if let Some(why) = run_line_with_a_verb(&cmd, &argv, at) {
            // The line is a run: its log format is read as one.
            let mut run = argv.clone();
            run.remove(at);
            let json = super::said::json_wanted(&cmd, &run);
            crate::logging::print_early_error(&why, json);
            return Err(ExitCode::Usage);
        }
        let word = argv.remove(at);
        argv.insert(1, word);
        // The line is the command's alone: the run form's variables at the top (LOCKRUN_TTL,
        // LOCKRUN_EVERY…) are not its, and clap would still read and check them (a value a run
        // refuses would make `lockrun status KEY` exit 64). The command reads its own.
        cmd = cmd.mut_args(|a| a.env(None));
    }
    let parsed = cmd
        .try_get_matches_from_mut(argv.clone())
        .and_then(|m| match m.subcommand() {
            None => run_from(&m),
            Some(("run", sub)) => run_from(sub),
            Some((_, sub)) => verbs::Verb::from_arg_matches(&m).map(|mut verb| {
                let common = verb.common_mut();
                common.logs.quiet_given = quiet_given(sub);
                common.conn.redis_from_env = from_env(sub, "redis");
                Invocation::Verb(Box::new(verb))
            }),
        });
    parsed.map_err(|e| said(&cmd, e, &argv))
}

/// The run form from its matches (the whole line's, or `run`'s).
fn run_from(m: &clap::ArgMatches) -> Result<Invocation, clap::Error> {
    let mut args = Args::from_arg_matches(m)?;
    // Before the key, as it has always been counted: a `-q` between the key and the command
    // yields to `-v` like the variable does.
    args.logs.quiet_given = quiet_given(m) && m.index_of("quiet") < m.index_of("key");
    args.conn.redis_from_env = from_env(m, "redis");
    Ok(Invocation::Run(Box::new(args)))
}

/// Whether option `id`'s value came from its environment variable.
fn from_env(m: &clap::ArgMatches, id: &str) -> bool {
    m.value_source(id) == Some(clap::parser::ValueSource::EnvVariable)
}

/// Whether `-q` came from the command line rather than `LOCKRUN_QUIET` (see [`super::Logs::quiet_given`]).
fn quiet_given(m: &clap::ArgMatches) -> bool {
    m.value_source("quiet") == Some(clap::parser::ValueSource::CommandLine)
}

/// Whether the line whose word `at` is an operator's command is really a run of a lock named
/// like it: a `--` (only a run has a command after it) or an option only a run takes (`-E`,
/// `--every`). The command would read the run's command as its KEY and exit 0 (`lockrun -q
/// history -- ./rotate.sh`: cron saw success and the job never ran), so it is refused, saying
/// what to write instead. `run` itself takes all of them.
fn run_line_with_a_verb(cmd: &clap::Command, argv: &[OsString], at: usize) -> Option<String> {
    let verb = argv[at].to_string_lossy();
    let sub = cmd
        .find_subcommand(&*verb)
        .filter(|s| s.get_name() != "run")?;
    // Whether `c` has the option the word names exactly (`--name`, `--name=…`, `-c`; help and
    // version are every command's: clap adds a verb's own when it is built).
    let has = |c: &clap::Command, word: &str| {
        let name = word.split('=').next().unwrap_or(word);
        c.get_arguments()
            .filter(|a| !is_help_or_version(a))
            .any(|a| {
                name.strip_prefix("--").map_or(
                    name.len() == 2
                        && name.strip_prefix('-').and_then(|c| c.chars().next()) == a.get_short(),
                    |long| a.get_long() == Some(long),
                )
            })
    };
    let runs = argv[1..]
        .iter()
        .map(|w| w.to_string_lossy())
        .any(|w| w == "--" || (w.starts_with('-') && has(cmd, &w) && !has(sub, &w)));
    runs.then(|| {
        format!(
            "'{verb}' is an operators' command (lockrun {verb} --help), and this line has a \
             command or options for a run: to run a command under a lock named '{verb}', \
             write 'lockrun run {verb} -- COMMAND…'"
        )
    })
}

/// The help and version flags: clap's actions, not options of lockrun's.
pub(super) fn is_help_or_version(a: &clap::Arg) -> bool {
    use clap::ArgAction::{Help, HelpLong, HelpShort, Version};
    matches!(a.get_action(), Help | HelpShort | HelpLong | Version)
}

/// An environment variable set to the empty string counts as unset (its default applies):
/// templated manifests and `VAR= lockrun …` produce empty values that mean "nothing here".
pub(super) fn without_empty_env(mut cmd: clap::Command) -> clap::Command {
    let empty: Vec<clap::Id> = cmd
        .get_arguments()
        .filter(|a| {
            a.get_env()
                .and_then(std::env::var_os)
                .is_some_and(|v| v.is_empty())
        })
        .map(|a| a.get_id().clone())
        .collect();
    for id in empty {
        cmd = cmd.mut_arg(id, |a| a.env(None));
    }
    cmd.mut_subcommands(without_empty_env)
}
