//! The command line: `lockrun [OPTIONS] <KEY> [--] <COMMAND> [ARGS]...`, and the operators'
//! commands ([`verbs`]), described once ([`command`]) and read by clap alone.
//!
//! Every option also reads a `LOCKRUN_*` environment variable, so a Kubernetes manifest or a
//! systemd unit can configure lockrun without flags. Flags win over the environment.
//!
//! Where each part lives: the options (`options.rs`), what help says beyond them and its two
//! tiers (`help.rs`), which form a line is and its one parse (`dispatch.rs`), a line's words
//! read before clap reads them (`words.rs`), what a line that does not parse becomes
//! (`said.rs`), the operators' commands ([`verbs`]).

mod dispatch;
mod help;
mod options;
mod said;
pub mod verbs;
mod words;

pub use help::{COMMAND_ENV, ENV_ONLY, ENV_RULES, EXAMPLE};
pub use options::{
    Args, Connection, Logs, OnLost, DEFAULT_HISTORY, MAX_HISTORY, MAX_TTL, MIN_TTL,
    WITHHELD_FROM_JOB,
};

use crate::exit_codes::ExitCode;
use clap::CommandFactory;
use help::{run_form, HELP_WIDTH};
use std::ffi::OsString;

/// What the command line asks for: a run (the classic form, or `lockrun run …`) or one of the
/// operators' commands.
#[derive(Debug)]
pub enum Invocation {
    Run(Box<Args>),
    Verb(Box<verbs::Verb>),
}

/// The command line, described once: the run form ([`Args`]) with the operators' commands
/// ([`verbs::Verb`]) and `run`, the explicit run form, as its subcommands. Parsing uses it, and
/// so do `--help`, the man pages, the completions and docs/guide.md's options table
/// (`examples/gen-docs.rs`).
///
/// A subcommand is taken only as the first word (`args_conflicts_with_subcommands`), so a
/// run's KEY and COMMAND can be any word; [`parse_from`] brings a command word that follows
/// options to the front. No `help` subcommand: `lockrun help …` runs a lock named "help".
pub fn command() -> clap::Command {
    use clap::{Args as _, Subcommand as _};
    let run = Args::augment_args(clap::Command::new("run"))
        .about("Run COMMAND under KEY, for a lock named like one of these commands")
        .override_usage("lockrun run [OPTIONS] <KEY> [--] <COMMAND> [ARGS]...")
        // `lockrun run --version` says what `lockrun --version` says.
        .display_name("lockrun");
    verbs::Verb::augment_subcommands(run_form(Args::command()))
        .subcommand(run_form(run))
        .mut_subcommands(|c| match c.get_name() {
            "run" => c,
            _ => verbs::for_a_verb(c),
        })
        .args_conflicts_with_subcommands(true)
        .disable_help_subcommand(true)
        // clap wraps at the terminal's width: never wider than this, whatever the terminal.
        .max_term_width(HELP_WIDTH)
}

/// Parses the process arguments. Help and version print to stdout; errors print one line to
/// stderr. Either way the caller gets the exit code to use.
pub fn parse() -> Result<Invocation, ExitCode> {
    parse_from(std::env::args_os())
}

/// [`parse`] of given words (the program's name first). A line is the run form unless the
/// first word that is not an option (or an option's value) names a subcommand of [`command`];
/// that word moves to the front, so the connection and log options may
/// come before it as well as after (`lockrun -r URL status KEY`). `run` is the run form again,
/// for a lock named like a command. How: `cli/dispatch.rs`.
pub fn parse_from<I, T>(args: I) -> Result<Invocation, ExitCode>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    dispatch::parse_from(args.into_iter().map(Into::into).collect())
}

/// Held by every test that sets `LOCKRUN_*` variables: clap reads the process's environment,
/// which the tests, on several threads, share.
#[cfg(test)]
static TEST_ENV: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[cfg(test)]
mod tests {
    use super::dispatch::{command_word, is_help_or_version, whole, without_empty_env};
    use super::said::{help_or_version, json_wanted, one_line};
    use super::*;
    use crate::logging::Format;
    use std::time::Duration;

    /// Each line (after `lockrun`) parsed with `vars` set, one test at a time.
    fn parse_with_vars(
        vars: &[(&str, &str)],
        lines: &[&[&str]],
    ) -> Vec<Result<Invocation, ExitCode>> {
        let _env = TEST_ENV.lock().unwrap_or_else(|e| e.into_inner());
        for (k, v) in vars {
            std::env::set_var(k, v);
        }
        let parsed = lines
            .iter()
            .map(|args| parse_from(std::iter::once("lockrun").chain(args.iter().copied())))
            .collect();
        for (k, _) in vars {
            std::env::remove_var(k);
        }
        parsed
    }

    #[test]
    fn a_plain_run_is_read_as_the_whole_command_reads_it() {
        let _env = TEST_ENV.lock().unwrap_or_else(|e| e.into_inner());
        let argv = |line: &[&str]| -> Vec<OsString> {
            std::iter::once("lockrun")
                .chain(line.iter().copied())
                .map(OsString::from)
                .collect()
        };
        for line in [
            &["k", "--", "true"][..],
            &[
                "-q",
                "-E",
                "0",
                "--every",
                "1m",
                "nightly",
                "--",
                "/bin/report.sh",
                "-x",
            ],
            &[
                "-r",
                "redis://a:1",
                "-r",
                "redis://b,redis://c",
                "-t5s",
                "-vv",
                "k",
                "ls",
                "-la",
            ],
            &[
                "-w",
                "forever",
                "--limit",
                "3",
                "--log-format=json",
                "k",
                "--",
                "-q",
            ],
            &["k", "-q", "--", "cmd"],
            &[
                "--metrics-file",
                "/tmp/m.prom",
                "--kill-after",
                "3s",
                "--no-group",
                "k",
                "x",
            ],
        ] {
            let Ok(Invocation::Run(fast)) = dispatch::parse_from(argv(line)) else {
                panic!("{line:?}: not read as a plain run");
            };
            match whole(argv(line), None) {
                Ok(Invocation::Run(whole)) => assert_eq!(fast, whole, "{line:?}"),
                other => panic!("{line:?}: the whole command read {other:?}"),
            }
        }
        // A command word, wherever the options put it, is the whole command's to read.
        let run = without_empty_env(Args::command());
        for (line, at) in [
            (&["status", "k"][..], 1),
            (&["-r", "redis://a", "-t5s", "list"], 4),
            (&["-vq", "--ttl", "5s", "run", "status", "--", "true"], 4),
            (&["k", "status"], 0),
            (&["-r", "status", "k", "true"], 0),
            (&["--", "status", "true"], 0),
        ] {
            let at = Some(at).filter(|&at| at > 0);
            assert_eq!(command_word(&run, &argv(line)), at, "{line:?}");
        }
    }

    fn parse(args: &[&str]) -> Result<Args, ExitCode> {
        match parse_any(args)? {
            Invocation::Run(a) => Ok(*a),
            Invocation::Verb(v) => panic!("{args:?} parsed as {v:?}"),
        }
    }

    fn parse_any(args: &[&str]) -> Result<Invocation, ExitCode> {
        let _env = TEST_ENV.lock().unwrap_or_else(|e| e.into_inner());
        parse_from(std::iter::once("lockrun").chain(args.iter().copied()))
    }

    #[test]
    fn command_after_key_with_and_without_separator() {
        let a = parse(&["k", "--", "echo", "-n", "hi"]).unwrap();
        assert_eq!(a.key, "k");
        assert_eq!(a.command, ["echo", "-n", "hi"]);
        let a = parse(&["-t", "5s", "k", "ls", "-la"]).unwrap();
        assert_eq!(a.command, ["ls", "-la"]);
        assert_eq!(a.ttl, Duration::from_secs(5));
    }

    #[test]
    fn bad_input_is_a_usage_error() {
        for args in [
            &["", "true"][..],
            &["k"],
            &["-t", "0", "k", "true"],
            &["-t", "50ms", "k", "true"],
            &["-t", "2d", "k", "true"],
            &["-E", "300", "k", "true"],
            &["--on-lost", "explode", "k", "true"],
            &["--limit", "0", "k", "true"],
            &["lockrun:fence:{k}", "true"],
        ] {
            assert_eq!(parse(args).err(), Some(ExitCode::Usage), "{args:?}");
        }
    }

    #[test]
    fn every_out_of_range_is_a_usage_error() {
        for bad in ["1s", "0", "367d", "soon"] {
            assert_eq!(
                parse(&["--every", bad, "k", "true"]).err(),
                Some(ExitCode::Usage),
                "{bad}"
            );
        }
    }

    #[test]
    fn one_line_errors() {
        let s = one_line("error: the following required arguments were not provided:\n  <COMMAND>...\n\nUsage: x\n");
        assert_eq!(
            s,
            "error: the following required arguments were not provided: <COMMAND>..."
        );
    }

    fn verb(args: &[&str]) -> verbs::Verb {
        match parse_any(args) {
            Ok(Invocation::Verb(v)) => *v,
            other => panic!("{args:?} parsed as {other:?}"),
        }
    }

    /// Every option can be set through a variable (`-v` alone counts, `LOCKRUN_LOG` is its
    /// variable): a Kubernetes manifest or a systemd unit configures lockrun without flags.
    #[test]
    fn every_option_has_a_variable() {
        for a in command().get_arguments() {
            if a.is_positional() || a.get_id() == "verbose" || is_help_or_version(a) {
                continue;
            }
            let var = a.get_env().map(|v| v.to_string_lossy().into_owned());
            let long = a.get_long().unwrap_or_default();
            let expected = format!("LOCKRUN_{}", long.to_uppercase().replace('-', "_"));
            // The variables not named after their flag: what a URL is, not a verb.
            let expected = match long {
                "redis" => "LOCKRUN_REDIS_URL".to_string(),
                "ping" => "LOCKRUN_PING_URL".to_string(),
                _ => expected,
            };
            assert_eq!(var.as_deref(), Some(expected.as_str()), "--{long}");
        }
    }

    #[test]
    fn an_operators_command_does_not_read_the_runs_variables() {
        // A unit or manifest that configures runs (LOCKRUN_EVERY, LOCKRUN_TTL…) must not
        // break `lockrun status KEY` in the same environment, even with a value a run refuses.
        let vars = [
            ("LOCKRUN_EVERY", "1s"),
            ("LOCKRUN_TTL", "forever"),
            ("LOCKRUN_LIMIT", "0"),
            ("LOCKRUN_REDIS_URL", "redis://h:1"),
        ];
        let [status, after_options, run, plain] = parse_with_vars(
            &vars,
            &[
                &["status", "k"],
                &["-r", "redis://x", "history", "k"],
                &["run", "k", "true"],
                &["k", "true"],
            ],
        )
        .try_into()
        .unwrap();
        let Ok(Invocation::Verb(v)) = status else {
            panic!("{status:?}")
        };
        // Its own variables it still reads.
        assert_eq!(v.common().conn.redis, ["redis://h:1"]);
        let Ok(Invocation::Verb(v)) = after_options else {
            panic!("{after_options:?}")
        };
        assert_eq!(v.common().conn.redis, ["redis://x"]);
        // A run reads them, and refuses the bad ones.
        assert_eq!(run.err(), Some(ExitCode::Usage));
        assert_eq!(plain.err(), Some(ExitCode::Usage));
    }

    #[test]
    fn variables_set_options_flags_win_and_empty_counts_as_unset() {
        let vars = [
            ("LOCKRUN_TTL", "1m"),
            ("LOCKRUN_REDIS_URL", "redis://h:1"),
            ("LOCKRUN_QUIET", "yes"),
            ("LOCKRUN_WAIT", ""),
            ("LOCKRUN_CONFLICT_EXIT_CODE", ""),
            ("LOCKRUN_LOG_FORMAT", ""),
        ];
        let [from_env, flags, status] = parse_with_vars(
            &vars,
            &[
                &["k", "true"],
                &["-t", "2m", "-r", "redis://x", "k", "true"],
                &["status", "k"],
            ],
        )
        .try_into()
        .unwrap();
        let Ok(Invocation::Run(a)) = from_env else {
            panic!("{from_env:?}")
        };
        assert_eq!(a.ttl, Duration::from_secs(60));
        assert_eq!(a.conn.redis, ["redis://h:1"]);
        assert!(a.logs.quiet && !a.logs.quiet_given);
        assert!(a.wait.is_zero());
        assert_eq!(a.conflict_exit_code, crate::exit_codes::DEFAULT_CONFLICT);
        assert_eq!(a.logs.log_format, Format::Text);
        let Ok(Invocation::Run(a)) = flags else {
            panic!("{flags:?}")
        };
        assert_eq!(a.ttl, Duration::from_secs(120));
        assert_eq!(a.conn.redis, ["redis://x"]);
        // The operators' commands read the same variables.
        let Ok(Invocation::Verb(v)) = status else {
            panic!("{status:?}")
        };
        assert_eq!(v.common().conn.redis, ["redis://h:1"]);
    }

    #[test]
    fn redis_from_env_says_where_the_urls_came_from() {
        let from_env = |r: &Result<Invocation, ExitCode>| match r {
            Ok(Invocation::Run(a)) => a.conn.redis_from_env,
            Ok(Invocation::Verb(v)) => v.common().conn.redis_from_env,
            Err(_) => panic!("parse failed"),
        };
        let var = [("LOCKRUN_REDIS_URL", "redis://from-env:1")];
        let parsed = parse_with_vars(
            &var,
            &[
                &["k", "true"],
                &["run", "k", "true"],
                &["status", "k"],
                &["-r", "redis://h:1", "k", "true"],
                &["status", "-r", "redis://h:1", "k"],
            ],
        );
        let said: Vec<bool> = parsed.iter().map(from_env).collect();
        assert_eq!(said, [true, true, true, false, false]);
        assert!(!from_env(&parse_with_vars(&[], &[&["k", "true"]])[0]));
    }

    #[test]
    fn quiet_given_says_where_quiet_came_from() {
        assert!(parse(&["-q", "k", "true"]).unwrap().logs.quiet_given);
        assert!(parse(&["-vq", "k", "true"]).unwrap().logs.quiet_given);
        // Counted before the key only; after the command it is the command's.
        assert!(!parse(&["k", "-q", "true"]).unwrap().logs.quiet_given);
        assert!(parse(&["k", "-q", "true"]).unwrap().logs.quiet);
        assert!(!parse(&["k", "true", "-q"]).unwrap().logs.quiet_given);
        assert!(verb(&["-q", "status", "k"]).common().logs.quiet_given);
        assert!(verb(&["status", "k", "-q"]).common().logs.quiet_given);
        assert!(!verb(&["status", "k"]).common().logs.quiet_given);
    }

    /// A command word is one only as the first word that is not an option or its value; the
    /// run form takes any other word as KEY or COMMAND.
    #[test]
    fn command_words_and_the_run_form() {
        let v = verb(&["-r", "redis://h:1", "-q", "status", "k", "--json"]);
        assert!(matches!(&v, verbs::Verb::Status(s) if s.key == "k"));
        assert_eq!(v.common().conn.redis, ["redis://h:1"]);
        assert!(v.common().json && v.common().logs.quiet);
        let v = verb(&["-vv", "--log-format=json", "history", "k", "-n", "5"]);
        assert!(matches!(&v, verbs::Verb::History(h) if h.count == 5));
        assert_eq!(v.common().logs.verbose, 2);
        assert!(matches!(verb(&["list"]), verbs::Verb::List(l) if l.pattern == "*"));
        for (line, key, command) in [
            (
                &["-t", "5s", "run", "status", "--", "true"][..],
                "status",
                "true",
            ),
            (&["run", "-E", "0", "run", "true"], "run", "true"),
            (&["k", "status"], "k", "status"),
            (&["-t", "5s", "k", "run", "x"], "k", "run"),
            (&["--", "status", "true"], "status", "true"),
            (&["help", "true"], "help", "true"),
            (&["statuses", "true"], "statuses", "true"),
            (&["-r", "status", "k", "true"], "k", "true"),
        ] {
            let a = parse(line).unwrap();
            assert_eq!(
                (a.key.as_str(), a.command[0].to_str().unwrap()),
                (key, command),
                "{line:?}"
            );
        }
        let a = parse(&["-t", "5s", "run", "-E", "0", "k", "true"]).unwrap();
        assert_eq!((a.ttl, a.conflict_exit_code), (Duration::from_secs(5), 0));
    }

    /// A verb's line with a command after `--`, or with an option only a run takes, is refused
    /// (the verb would read the command as its KEY and exit 0).
    #[test]
    fn a_run_line_with_a_command_word_is_refused() {
        for line in [
            &["-q", "history", "--", "./rotate.sh"][..],
            &["-E", "0", "status", "--", "sh"],
            &["list", "--every", "1m", "sh", "-c", "x"],
            &["doctor", "-E", "0", "--", "sh"],
            &["status", "k", "--"],
            &["release", "--ttl=5s", "k"],
        ] {
            assert_eq!(parse_any(line).err(), Some(ExitCode::Usage), "{line:?}");
        }
    }

    /// What `lockrun <words>` prints for help, through the path a real line takes.
    fn help_of(words: &[&str], pin_width: bool) -> String {
        let argv: Vec<OsString> = std::iter::once("lockrun")
            .chain(words.iter().copied())
            .map(Into::into)
            .collect();
        let _env = TEST_ENV.lock().unwrap_or_else(|e| e.into_inner());
        let mut cmd = without_empty_env(command());
        if pin_width {
            // The line count is judged at 80 columns, not at the width of whatever terminal
            // runs the tests.
            cmd = cmd.term_width(HELP_WIDTH);
        }
        let e = cmd.try_get_matches_from_mut(&argv).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::DisplayHelp, "{words:?}");
        help_or_version(&cmd, &e, &argv)
    }

    fn assert_fits(text: &str, words: &[&str]) {
        for line in text.lines() {
            assert!(line.chars().count() <= HELP_WIDTH, "{words:?}: {line:?}");
        }
    }

    #[test]
    fn short_help_fits_a_screen_under_headings_with_an_example() {
        for words in [&["-h"][..], &["run", "-h"]] {
            assert_fits(&help_of(words, false), words);
            let help = help_of(words, true);
            assert!(help.lines().count() <= 45, "{words:?}: {help}");
            for heading in [
                "Lock:",
                "Job:",
                "Redis connection:",
                "TLS:",
                "Durability:",
                "Output:",
                "Example (",
                "Exit codes:",
            ] {
                assert!(
                    help.lines().any(|l| l.starts_with(heading)),
                    "{words:?} lacks {heading}: {help}"
                );
            }
            // Each option on one line: the variables and the command list are --help's.
            assert!(!help.contains("[env:"), "{help}");
            assert!(!help.contains("Commands:"), "{help}");
            assert!(!help.contains("--min-hold"), "{help}");
        }
        assert!(help_of(&["run", "-h"], true).contains("Usage: lockrun run "));
        assert!(help_of(&["-h"], true).contains("status|list|release|history|doctor"));
    }

    #[test]
    fn long_help_has_every_option_variable_and_what_the_command_gets() {
        let help = help_of(&["--help"], true);
        for needle in [
            "Commands:",
            "--min-hold",
            "[env: LOCKRUN_TTL]",
            "[env: LOCKRUN_REDIS_URL]",
            "LOCKRUN_REDIS_PASSWORD\n",
            "LOCKRUN_SENTINEL_PASSWORD\n",
            "LOCKRUN_LOG\n",
            "LOCKRUN_KEY\n",
            "LOCKRUN_TOKEN\n",
            "LOCKRUN_FENCE\n",
            "LOCKRUN_HELD\n",
            "valkey://",
            "valkeys://",
        ] {
            assert!(help.contains(needle), "--help lacks {needle:?}: {help}");
        }
        // The text lockrun wraps itself (exit codes, variables) fits as well.
        let end = &help[help.find("Exit codes:").unwrap()..];
        assert_fits(end, &["--help"]);
        for code in ExitCode::DOCUMENTED {
            let line = format!("\n  {} ", code.summary().code);
            assert!(end.contains(&line), "--help lacks {line:?}: {end}");
        }
    }

    /// Each operators' command's help speaks of that command: its own exit codes, no option
    /// only a run has (`-E`, a TTL).
    #[test]
    fn each_command_has_its_own_short_help() {
        for verb in ["status", "list", "release", "history", "doctor"] {
            let words = [verb, "-h"];
            assert_fits(&help_of(&words, false), &words);
            let help = help_of(&words, true);
            assert!(help.lines().count() <= 45, "{verb}: {help}");
            assert!(help.contains(&format!("Usage: lockrun {verb} ")), "{help}");
            assert!(help.contains("Exit codes: 0"), "{verb}: {help}");
            assert!(!help.contains("[env:"), "{verb}: {help}");
            let long = help_of(&[verb, "--help"], true);
            for run_only in ["-E", "TTL/3", "--every"] {
                assert!(
                    !long.contains(run_only),
                    "{verb} --help: {run_only}: {long}"
                );
            }
            assert!(long.contains("[env: LOCKRUN_QUIET]"), "{verb}: {long}");
        }
    }

    #[test]
    fn a_usage_error_is_said_in_json_when_json_was_asked_for() {
        let words = |args: &[&str]| -> Vec<OsString> {
            std::iter::once("lockrun")
                .chain(args.iter().copied())
                .map(Into::into)
                .collect()
        };
        let _env = TEST_ENV.lock().unwrap_or_else(|e| e.into_inner());
        for (line, json) in [
            (&["--log-format", "json", "-t", "0", "k", "true"][..], true),
            (&["-t", "0", "--log-format=json", "k", "true"], true),
            (&["--log-format", "JSON", "k", "true"], true),
            (&["-E", "300", "k", "true"], false),
            (&["--bogus", "--log-format", "json", "k", "true"], true),
            (
                &["-x", "--bogus", "--log-format", "json", "k", "true"],
                true,
            ),
            (&["status", "--log-format", "json"], true),
            (&["--log-format", "json", "status"], true),
            // After the command, the words are the command's.
            (&["k", "--log-format", "json"], true),
            (&["k", "true", "--log-format", "json"], false),
            // A value clap would not take: `-r` has none, and `--log-format` is read.
            (&["-r", "--log-format", "json", "k", "true"], true),
            (&["-t", "--log-format", "json", "k", "true"], false),
            // Given twice, or without a value: clap refuses it, and no format was asked for.
            (
                &["--log-format", "json", "k", "--log-format", "json"],
                false,
            ),
            (&["--log-format", "json", "--log-format"], false),
            (
                &["run", "--log-format", "json", "run", "--log-format", "x"],
                false,
            ),
            (
                &[
                    "run",
                    "--log-format",
                    "json",
                    "run",
                    "--",
                    "--log-format",
                    "x",
                ],
                true,
            ),
            (&["history", "-n", "--log-format", "json", "k"], true),
        ] {
            assert_eq!(json_wanted(&command(), &words(line)), json, "{line:?}");
        }
        std::env::set_var("LOCKRUN_LOG_FORMAT", " json");
        std::env::set_var("LOCKRUN_TTL", "0");
        let from_env = json_wanted(&command(), &words(&["k", "true"]));
        let flag_wins = json_wanted(&command(), &words(&["--log-format", "text", "k", "true"]));
        std::env::remove_var("LOCKRUN_LOG_FORMAT");
        std::env::remove_var("LOCKRUN_TTL");
        assert!(from_env && !flag_wins);
    }
}
