//! `cron` and `anacrontab` blocks: each entry's command run once as cron (or anacron) runs it,
//! and at once a second time when it keeps its key.

use super::fixture::{explain, substitute, Fixture, Scratch};
use super::{Counts, STAND_INS};
use crate::support::doc_blocks::Block;
use crate::support::lockrun_bin;
use std::path::Path;
use std::process::{Command, Stdio};

impl Fixture {
    pub(super) fn run_cron(&mut self, b: &Block, counts: &mut Counts) -> Result<(), String> {
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

    pub(super) fn run_anacrontab(&mut self, b: &Block, counts: &mut Counts) -> Result<(), String> {
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

    pub(super) fn run_cron_command(
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
}

/// A crontab entry's schedule and command: five time fields or an `@` nickname, then the rest.
pub(super) fn cron_entry(line: &str) -> Option<(String, String)> {
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
pub(super) fn anacron_entry(line: &str) -> Option<String> {
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

pub(super) fn valid_schedule(schedule: &str) -> bool {
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
