//! Writes the man pages and shell completions from the clap definitions (`cli::Args` for the run
//! form, `cli::verbs::VerbLine` for the operators' commands):
//!
//!     cargo run --example gen-docs -- packaging        # writes packaging/man, packaging/completions
//!
//! The generated files are committed; `bash packaging/check-generated.sh` fails when they are
//! stale. clap_mangen and clap_complete are dev-dependencies: the shipped binary does not carry
//! them.

use clap::CommandFactory;
use clap_complete::Shell;
use lockrun::cli::{verbs::VerbLine, Args};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The run form with the operators' commands (and `run`) as subcommands: what a shell should
/// offer as the first word. Only for completions and the man page's COMMANDS section; parsing
/// keeps its own logic in `cli::parse_from`.
fn whole_command() -> clap::Command {
    let run_form = Args::command();
    let run = clap::Command::new("run")
        .about("Run COMMAND under lock KEY: the explicit run form, for a lock named like a command")
        .override_usage("lockrun run [OPTIONS] <KEY> [--] <COMMAND> [ARGS]...")
        .args(
            run_form
                .get_arguments()
                .filter(|a| !a.is_global_set())
                .cloned(),
        );
    let verbs = VerbLine::command();
    run_form
        .subcommands(verbs.get_subcommands().cloned())
        .subcommand(run)
        .args_conflicts_with_subcommands(true)
}

fn write(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    fs::create_dir_all(path.parent().expect("a file in a directory"))?;
    fs::write(path, bytes)?;
    println!("{}", path.display());
    Ok(())
}

fn man_page(cmd: clap::Command, extra: Option<&clap::Command>) -> std::io::Result<Vec<u8>> {
    let cmd = cmd.version(env!("CARGO_PKG_VERSION"));
    let has_after_help = cmd.get_after_help().is_some();
    let man = clap_mangen::Man::new(cmd).date("");
    let mut out = Vec::new();
    let Some(whole) = extra else {
        man.render(&mut out)?;
        return Ok(out);
    };
    man.render_title(&mut out)?;
    man.render_name_section(&mut out)?;
    man.render_synopsis_section(&mut out)?;
    man.render_description_section(&mut out)?;
    man.render_options_section(&mut out)?;
    // The run form has no clap subcommands (a command word is recognised before clap parses),
    // so its page lists them by hand, each pointing at its own page.
    let mut roff = clap_mangen::roff::Roff::new();
    roff.control("SH", ["COMMANDS"]);
    for sub in whole.get_subcommands() {
        let name = sub.get_name();
        roff.control("TP", [] as [&str; 0]);
        roff.text([clap_mangen::roff::bold(format!("lockrun {name}"))]);
        let about = sub.get_about().map(|s| s.to_string()).unwrap_or_default();
        roff.text([clap_mangen::roff::roman(format!(
            "{about}. See lockrun-{name}(1)."
        ))]);
    }
    // clap_mangen does not print `env = ...`: every option's variable, listed here.
    roff.control("SH", ["ENVIRONMENT"]);
    roff.text([clap_mangen::roff::roman(
        "Every option can also be set through its variable; a flag wins over the variable, an \
         empty variable counts as unset. Switches take 1/0, yes/no, on/off, true/false.",
    )]);
    for arg in whole.get_arguments() {
        let (Some(var), Some(long)) = (arg.get_env(), arg.get_long()) else {
            continue;
        };
        roff.control("TP", [] as [&str; 0]);
        roff.text([clap_mangen::roff::bold(var.to_string_lossy().into_owned())]);
        roff.text([clap_mangen::roff::roman(format!("--{long}"))]);
    }
    for (var, what) in [
        ("LOCKRUN_REDIS_PASSWORD", "the Redis password itself (not with --redis-password-file)"),
        ("LOCKRUN_SENTINEL_PASSWORD", "the sentinels' password itself (not with --sentinel-password-file)"),
        ("LOCKRUN_LOG", "the log level or filter when neither -q nor -v is given (error, warn, info, debug, trace, target=level)"),
    ] {
        roff.control("TP", [] as [&str; 0]);
        roff.text([clap_mangen::roff::bold(var)]);
        roff.text([clap_mangen::roff::roman(what)]);
    }
    roff.control("PP", [] as [&str; 0]);
    roff.text([clap_mangen::roff::roman(
        "The command gets LOCKRUN_KEY (the lock key), LOCKRUN_TOKEN (this holder's secret token) \
         and LOCKRUN_FENCE (a fencing number, strictly increasing per key).",
    )]);
    roff.to_writer(&mut out)?;
    if has_after_help {
        man.render_extra_section(&mut out)?;
    }
    man.render_version_section(&mut out)?;
    Ok(out)
}

fn main() -> std::io::Result<()> {
    let out: PathBuf = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("packaging"));
    let whole = whole_command();

    write(
        &out.join("man/lockrun.1"),
        &man_page(Args::command(), Some(&whole))?,
    )?;
    for sub in whole.get_subcommands() {
        // clap is built without its `string` feature: names are &'static str.
        let name: &'static str = format!("lockrun-{}", sub.get_name()).leak();
        let bin_name = format!("lockrun {}", sub.get_name());
        let page = sub.clone().name(name).bin_name(bin_name);
        write(&out.join(format!("man/{name}.1")), &man_page(page, None)?)?;
    }

    for (shell, file) in [
        (Shell::Bash, "lockrun.bash"),
        (Shell::Zsh, "_lockrun"),
        (Shell::Fish, "lockrun.fish"),
    ] {
        let mut buf = Vec::new();
        clap_complete::generate(shell, &mut whole.clone(), "lockrun", &mut buf);
        buf.flush()?;
        write(&out.join("completions").join(file), &buf)?;
    }
    Ok(())
}
