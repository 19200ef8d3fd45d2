//! A document's crontab block (the README's, the guide's standby line) made into the test's:
//! the same lines, but for the test's Redis, key and job.

use std::fmt::Write as _;
use std::path::Path;

/// The key of the README's crontab example; each configuration runs it under its own key.
pub const README_KEY: &str = "nightly-report";
/// The README's job; replaced by the test's job script.
pub const README_JOB: &str = "/usr/local/bin/report.sh";

/// The first ```` ```cron ```` fenced block under the `## Crontab` heading of the README (before
/// the next `## ` heading): the lines the docs tell people to install.
pub fn readme_crontab_block(readme: &str) -> Result<String, String> {
    crontab_block(readme, "README.md", "## Crontab")
}

/// The first ```` ```cron ```` fenced block of `doc` (named `name` in errors) under the heading
/// line `heading`, before the next heading of its level or above (`## Crontab` ends at the next
/// `## ` or `# `): the lines that section tells people to install.
pub fn crontab_block(doc: &str, name: &str, heading: &str) -> Result<String, String> {
    fenced_block(doc, name, heading, "cron")
}

/// The first fenced block with info string `info` of `doc` (named `name` in errors) under the
/// heading line `heading`, before the next heading of its level or above.
pub fn fenced_block(doc: &str, name: &str, heading: &str, info: &str) -> Result<String, String> {
    let level = heading.chars().take_while(|c| *c == '#').count();
    let ends_section = |l: &str| {
        let hashes = l.chars().take_while(|c| *c == '#').count();
        (1..=level).contains(&hashes) && l[hashes..].starts_with(' ')
    };
    let fence = format!("```{info}");
    let mut lines = doc.lines();
    lines
        .by_ref()
        .find(|l| l.trim_end() == heading)
        .ok_or(format!("{name} has no `{heading}` heading"))?;
    let mut block = None;
    for line in lines.by_ref() {
        if ends_section(line) {
            break;
        }
        if line.trim_end() == fence {
            block = Some(String::new());
            break;
        }
    }
    let mut block = block.ok_or(format!("no {fence} block under `{heading}` in {name}"))?;
    for line in lines {
        if line.trim_end() == "```" {
            return Ok(block);
        }
        block.push_str(line);
        block.push('\n');
    }
    Err(format!(
        "the {fence} block under `{heading}` in {name} is not closed"
    ))
}

/// `NAME=value`, a crontab environment line.
fn env_line(line: &str) -> Option<(&str, &str)> {
    let (name, value) = line.split_once('=')?;
    let name = name.trim();
    let ok = !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    ok.then_some((name, value.trim()))
}

/// The line without the options that keep the key after the job (`--every D`, `--min-hold D`,
/// also as `--opt=D`): the control's line. `None` if it has none (the control would be the same
/// line, proving nothing).
pub fn without_hold(line: &str) -> Option<String> {
    let mut out = Vec::new();
    let mut tokens = line.split_whitespace();
    let mut removed = false;
    while let Some(t) = tokens.next() {
        if t == "--" {
            out.push(t);
            out.extend(tokens.by_ref());
            break;
        }
        if t == "--every" || t == "--min-hold" {
            tokens.next();
            removed = true;
        } else if t.starts_with("--every=") || t.starts_with("--min-hold=") {
            removed = true;
        } else {
            out.push(t);
        }
    }
    removed.then(|| out.join(" "))
}

/// What the README's block becomes for one configuration.
pub struct CrontabSpec<'a> {
    /// The test server's URL, for every Redis URL the block names (on the line, or as the value
    /// of an environment line).
    pub url: &'a str,
    /// The configuration's key, for [`README_KEY`].
    pub key: &'a str,
    /// The job script, for [`README_JOB`].
    pub job: &'a Path,
    /// Instead of the README's schedule line (LOCKRUN_CRON_LINE).
    pub line: Option<&'a str>,
    /// The control: the line without its hold ([`without_hold`]).
    pub control: bool,
    /// Lines appended as they are (the mail capture check).
    pub extra: &'a [String],
    /// Options put on the line before the key, as they are (the standby test's `--ttl`).
    pub options: &'a [&'a str],
}

/// A Redis URL token (the value of `-r`, `--redis=` or an environment line).
fn is_url(t: &str) -> bool {
    [
        "redis://",
        "rediss://",
        "valkey://",
        "valkeys://",
        "unix://",
        "redis+",
        "rediss+",
    ]
    .iter()
    .any(|p| t.starts_with(p))
}

/// The test crontab: the README's block as it is, with the test's URL, key and job (and, when
/// asked, line), then `extra`. Nothing is added: no `PATH=` (cron's own PATH is what the line
/// meets on a user's host) and no `LOCKRUN_*=` line (busybox crond would not pass it anyway).
/// Errors say what the block lacks.
pub fn build_crontab(block: &str, spec: &CrontabSpec) -> Result<String, String> {
    let is_schedule = |l: &str| {
        let t = l.trim();
        !t.is_empty() && !t.starts_with('#') && env_line(t).is_none()
    };
    let schedules: Vec<&str> = block.lines().filter(|l| is_schedule(l)).collect();
    if schedules.len() != 1 || !schedules[0].contains("lockrun") {
        return Err(format!(
            "the README's crontab block should have exactly one schedule line, running lockrun; \
             it has {schedules:?}"
        ));
    }
    let mut url_named = false;
    let mut out = String::new();
    for line in block.lines() {
        if let Some((name, value)) = env_line(line.trim()).filter(|_| !line.starts_with('#')) {
            if is_url(value) {
                url_named = true;
                writeln!(out, "{name}={}", spec.url).unwrap();
            } else {
                writeln!(out, "{line}").unwrap();
            }
            continue;
        }
        if !is_schedule(line) {
            writeln!(out, "{line}").unwrap();
            continue;
        }
        let mut sched = spec.line.unwrap_or(line).trim().to_string();
        if !sched.starts_with("* * * * * ") {
            return Err(format!(
                "the crontab line {sched:?} does not run every minute: the test counts one tick a \
                 minute"
            ));
        }
        if spec.control {
            sched = without_hold(&sched).ok_or_else(|| {
                format!(
                    "the crontab line {sched:?} has no --every or --min-hold to drop for the \
                     control: without a hold the line runs the job on several hosts a minute"
                )
            })?;
        }
        let mut tokens: Vec<String> = sched.split_whitespace().map(str::to_string).collect();
        if !tokens.iter().any(|t| t == README_KEY) {
            return Err(format!(
                "the crontab line {sched:?} has no key {README_KEY:?} to replace (update \
                 README_KEY in tests/support/cron/crontab.rs)"
            ));
        }
        if !tokens.iter().any(|t| t == README_JOB) {
            return Err(format!(
                "the crontab line {sched:?} does not run {README_JOB} (update README_JOB in \
                 tests/support/cron/crontab.rs)"
            ));
        }
        // The command: lockrun, after any `NAME=value` the shell assigns for it.
        let command = tokens[5..].iter().find(|t| env_line(t).is_none());
        if !command.is_some_and(|t| t == "lockrun" || t.ends_with("/lockrun")) {
            return Err(format!(
                "the crontab line {sched:?} does not run lockrun as its command"
            ));
        }
        let key_at = tokens.iter().position(|t| t == README_KEY).unwrap();
        for (k, option) in spec.options.iter().enumerate() {
            tokens.insert(key_at + k, option.to_string());
        }
        for t in tokens.iter_mut() {
            if t == README_KEY {
                *t = spec.key.into();
            } else if t == README_JOB {
                *t = spec.job.display().to_string();
            } else if is_url(t) {
                url_named = true;
                *t = spec.url.into();
            } else if let Some(v) = t.strip_prefix("--redis=") {
                url_named |= !v.is_empty();
                *t = format!("--redis={}", spec.url);
            }
        }
        writeln!(out, "{}", tokens.join(" ")).unwrap();
    }
    if !url_named {
        return Err(
            "the README's crontab block names no Redis: lockrun would use its default, \
             redis://127.0.0.1:6379, the host's own, so every host would run the job (and the \
             test's server is elsewhere)"
                .into(),
        );
    }
    for line in spec.extra {
        writeln!(out, "{line}").unwrap();
    }
    Ok(out)
}
