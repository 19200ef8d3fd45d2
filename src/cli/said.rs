//! What a parse that did not give an invocation becomes: help or version printed on stdout
//! (exit 0), or one line on stderr (exit 64), in JSON when the line asked for JSON logs.

use super::help::SHORT_HELP;
use super::words::values_of;
use crate::exit_codes::ExitCode;
use std::ffi::OsString;

/// What a clap error becomes: help and version printed (exit 0), anything else one line on
/// stderr (exit 64).
pub(super) fn said(cmd: &clap::Command, e: clap::Error, argv: &[OsString]) -> ExitCode {
    if !e.use_stderr() {
        // --help / --version, through `output` so a full stdout is exit 74, not 0.
        crate::output::print(&help_or_version(cmd, &e, argv));
        return ExitCode::Command(0);
    }
    let line = if e.kind() == clap::error::ErrorKind::InvalidUtf8 {
        // clap says "invalid UTF-8 was detected in one or more arguments" without saying
        // where: name the variable if one of ours is it.
        let var = cmd
            .get_arguments()
            .filter_map(|a| a.get_env())
            .find(|v| std::env::var_os(v).is_some_and(|x| x.to_str().is_none()));
        match var {
            Some(v) => format!(
                "the environment variable {} is not valid UTF-8 (see 'lockrun --help')",
                v.to_string_lossy()
            ),
            None => "an argument is not valid UTF-8 (see 'lockrun --help')".to_string(),
        }
    } else {
        let mut line = one_line(&e.to_string());
        if let Some(var) = from_environment(cmd, &e, argv) {
            line = format!("{line}, from the environment variable {var}");
        }
        line.push_str(" (see 'lockrun --help')");
        line.trim_start_matches("error: ").to_string()
    };
    crate::logging::print_early_error(&line, json_wanted(cmd, argv));
    ExitCode::Usage
}

/// The help or version text asked for: `--help` clap's own, `-h` the short tier
/// ([`super::help::short_help`]). Which one clap rendered shows in its text alone: the help
/// flag's own line.
pub(super) fn help_or_version(cmd: &clap::Command, e: &clap::Error, argv: &[OsString]) -> String {
    let rendered = e.render().to_string();
    if e.kind() != clap::error::ErrorKind::DisplayHelp || !rendered.contains(SHORT_HELP) {
        return rendered;
    }
    // The command is the line's first word, when that is a subcommand (a command word is
    // moved there before parsing).
    super::help::short_help(cmd, argv.get(1).and_then(|w| w.to_str()))
}

/// The environment variable an invalid value came from, when it did not come from the command
/// line: the user must be told where to look.
fn from_environment(cmd: &clap::Command, e: &clap::Error, argv: &[OsString]) -> Option<String> {
    use clap::error::{ContextKind, ContextValue};
    let (Some(ContextValue::String(arg)), Some(ContextValue::String(value))) = (
        e.get(ContextKind::InvalidArg),
        e.get(ContextKind::InvalidValue),
    ) else {
        return None;
    };
    let long = arg.split_whitespace().next()?.trim_start_matches('-');
    // The first option of that name that reads a variable (an operators' command's line has
    // the run form's variables taken off at the top).
    let var = cmd
        .get_arguments()
        .chain(cmd.get_subcommands().flat_map(|c| c.get_arguments()))
        .filter(|a| a.get_long() == Some(long))
        .find_map(|a| a.get_env())?
        .to_str()?
        .to_string();
    let on_command_line = argv.iter().any(|x| {
        let x = x.to_string_lossy();
        x == *value || x.ends_with(&format!("={value}"))
    });
    (std::env::var(&var).ok().as_deref() == Some(value.as_str()) && !on_command_line).then_some(var)
}

/// Whether the user asked for JSON log lines: a usage error is said before the options are
/// known, and a log pipeline that asked for JSON must not get a plain-text line it cannot
/// parse. The line's `--log-format` where `cmd` (the whole command, or a run's own definition)
/// reads options, its value taken as written (another option's refused value must not hide the
/// wish), else its variable; given twice or without a value, clap has refused it, and the line
/// is said in text.
pub(super) fn json_wanted(cmd: &clap::Command, argv: &[OsString]) -> bool {
    let is_it = |a: &clap::Arg| a.get_id() == "log_format";
    let given = values_of(cmd, argv, "log_format");
    // The variable's name from any definition of the option (a command's line has the run
    // form's variables taken off at the top).
    let var = || {
        cmd.get_arguments()
            .chain(cmd.get_subcommands().flat_map(|c| c.get_arguments()))
            .filter(|a| is_it(a))
            .find_map(|a| a.get_env())
            .and_then(|v| std::env::var(v).ok())
    };
    let value = match given.as_slice() {
        [] => var(),
        [Some(value)] => Some(value.clone()),
        _ => None,
    };
    value.is_some_and(|v| v.trim().eq_ignore_ascii_case("json"))
}

/// clap's errors span several lines (problem, usage, hint); cron mail and log pipelines want
/// one. Keep the first paragraph, joined, and point at --help.
/// Long values are cut (clap quotes the value it refused, and a key can be 100 KiB).
pub(super) fn one_line(rendered: &str) -> String {
    const MOST: usize = 400;
    let first: Vec<&str> = rendered
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .map(str::trim)
        .collect();
    let line = first.join(" ");
    if line.chars().count() <= MOST {
        return line;
    }
    let head: String = line.chars().take(MOST / 2).collect();
    let tail: String = {
        let rev: String = line.chars().rev().take(MOST / 2).collect();
        rev.chars().rev().collect()
    };
    format!("{head}…{tail}")
}
