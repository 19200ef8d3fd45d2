//! What help says beyond each option's own text, and its two tiers: `-h` fits a screen (each
//! option's first paragraph, one line, the common options only), `--help` has everything (the
//! later paragraphs, the rare options, the variables, every exit code).

use super::options::OUTPUT;
use crate::exit_codes::ExitCode;

/// The widest help line, and where [`hang`] wraps.
pub(super) const HELP_WIDTH: usize = 80;

/// What the run form's help says besides its options: the help and version flags under the
/// Output heading (`-V` in `--help` only), an example, the exit codes and the variables.
pub(super) fn run_form(cmd: clap::Command) -> clap::Command {
    use clap::{Arg, ArgAction};
    cmd.disable_help_flag(true)
        .disable_version_flag(true)
        .arg(help_flag())
        .arg(
            Arg::new("version")
                .short('V')
                .long("version")
                .action(ArgAction::Version)
                .help("Print version")
                .help_heading(OUTPUT)
                .hide_short_help(true),
        )
        .after_help(format!(
            "Example ({}):\n  {}\n\n\
             Exit codes: {}; the others, and the variables, in --help.",
            EXAMPLE.0,
            EXAMPLE.1,
            briefly(&[
                ExitCode::Command(0),
                ExitCode::Conflict(0),
                ExitCode::LockLost,
                ExitCode::Usage,
                ExitCode::Unavailable,
            ])
        ))
        .after_long_help(after_long_help())
}

/// The help flag's own line in `-h`, and so in `-h`'s text alone (`--help` has its long help).
pub(super) const SHORT_HELP: &str = "Print help (see more with '--help')";

/// clap's help flag, under the Output heading rather than alone under "Options" (clap's own
/// is off for every command: the setting is global).
pub(super) fn help_flag() -> clap::Arg {
    clap::Arg::new("help")
        .short('h')
        .long("help")
        .action(clap::ArgAction::Help)
        .help(SHORT_HELP)
        .long_help("Print help (see a summary with '-h')")
        .help_heading(OUTPUT)
}

/// The one example `-h` and `--help` (and the man page) end with: the commonest use, the
/// command of the README's crontab line. Not the crontab line itself: the `PATH=` prefix that
/// line needs for cron does not fit a help screen's width, and a wrapped crontab line does not
/// work.
pub const EXAMPLE: (&str, &str) = (
    "many hosts, one runs it each minute; its crontab line: README",
    "lockrun -r redis://db1 -q -E 0 --every 1m report -- /opt/report.sh",
);

/// The codes in a few words each, comma-separated (`76 lock lost, 64 usage error`).
fn briefly(codes: &[ExitCode]) -> String {
    let words: Vec<String> = codes.iter().map(|c| c.summary().briefly()).collect();
    words.join(", ")
}

/// How every option's variable works, said once for all of them (each option names its own).
pub const ENV_RULES: &str = "Every option also reads a LOCKRUN_* variable of its own: a \
flag wins over the variable, an empty variable counts as unset, switches take 1/0, yes/no, \
on/off, true/false.";

/// Variables read without an option of their own: (variable, default, what it does).
pub const ENV_ONLY: [(&str, &str, &str); 3] = [
    (
        "LOCKRUN_REDIS_PASSWORD",
        "none",
        "The Redis password itself (empty = unset); overrides a password in the URL. Not with \
         --redis-password-file (exit 64)",
    ),
    (
        "LOCKRUN_SENTINEL_PASSWORD",
        "none",
        "The sentinels' password itself. Not with --sentinel-password-file (exit 64)",
    ),
    (
        "LOCKRUN_LOG",
        "info",
        "The log level or filter when neither -q nor -v is given: error, warn, info, debug, \
         trace, or target=level filters (lockrun=debug). Any other word is a usage error; errors \
         are always printed whatever the filter says (off is refused: use -q)",
    ),
];

/// What the command finds in its environment: (variable, what it holds).
pub const COMMAND_ENV: [(&str, &str); 4] = [
    ("LOCKRUN_KEY", "The lock key"),
    (
        "LOCKRUN_TOKEN",
        "This holder's secret token; a lockrun of the same key nested inside uses it \
         (reentrancy)",
    ),
    (
        "LOCKRUN_FENCE",
        "A fencing number, strictly increasing per key: a resource can refuse writes that carry \
         a smaller number than one it has seen",
    ),
    (
        "LOCKRUN_HELD",
        "Every enclosing holder's <SHA-1 of its key>:<token>:<fence>, comma-separated, this one's \
         last: a lockrun nested anywhere inside runs reentrantly under a lock an ancestor holds \
         instead of waiting for it. Secret, like the token",
    ),
];

/// `--help`'s end: the example, every exit code, the variables lockrun reads beyond the options'
/// own, and what the command gets.
fn after_long_help() -> String {
    let codes = ExitCode::DOCUMENTED.map(ExitCode::summary);
    let code_width = codes.iter().map(|s| s.code.len()).max().unwrap_or(0);
    let mut text = format!("Example ({}):\n  {}\n\nExit codes:", EXAMPLE.0, EXAMPLE.1);
    for s in codes {
        text.push('\n');
        text.push_str(&hang(&format!("  {}", s.code), code_width + 4, s.meaning));
    }
    text.push_str("\n\nEnvironment:\n");
    text.push_str(&hang(
        "",
        2,
        &format!("{ENV_RULES} Read without an option of their own:"),
    ));
    for (var, _, what) in ENV_ONLY {
        text.push('\n');
        text.push_str(&hang(&format!("  {var}"), 10, what));
    }
    text.push_str("\n\nWhat the command gets in its environment:");
    for (var, what) in COMMAND_ENV {
        text.push('\n');
        text.push_str(&hang(&format!("  {var}"), 10, what));
    }
    text
}

/// `label`, then `text` from column `indent` on, wrapped at [`HELP_WIDTH`] with every line
/// indented as far (the label alone on its line when it reaches the column), as clap lays out
/// an option's help.
fn hang(label: &str, indent: usize, text: &str) -> String {
    let mut out = label.to_string();
    let mut col = label.chars().count();
    let mut fresh = true;
    if col >= indent {
        out.push('\n');
        col = 0;
    }
    for word in text.split_whitespace() {
        let width = word.chars().count();
        if !fresh && col + 1 + width > HELP_WIDTH {
            out.push('\n');
            col = 0;
            fresh = true;
        }
        if fresh {
            out.push_str(&" ".repeat(indent - col));
            col = indent;
            fresh = false;
        } else {
            out.push(' ');
            col += 1;
        }
        out.push_str(word);
        col += width;
    }
    out
}

/// `-h`'s help of the whole command `cmd`, or of its subcommand `sub`: it leaves out what would
/// not fit a screen, each option's `[env: …]` (`--help` has them) and the list of commands (the
/// usage names them).
pub(super) fn short_help(cmd: &clap::Command, sub: Option<&str>) -> String {
    let no_env = |c: clap::Command| c.mut_args(|a| a.hide_env(true));
    let mut cmd = no_env(cmd.clone()).mut_subcommands(|s| no_env(s).hide(true));
    cmd.build();
    match sub.and_then(|name| cmd.find_subcommand_mut(name)) {
        Some(sub) => sub.render_help().to_string(),
        None => cmd.render_help().to_string(),
    }
}
