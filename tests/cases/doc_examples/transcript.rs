//! Transcripts (`console`, or `$ ` lines without an info string) run command by command, and
//! output blocks compared with what the shell block above them printed.

use super::fixture::{explain, substitute, Fixture, Scratch};
use super::shell::shell_words;
use crate::support::doc_blocks::Block;
use crate::support::lockrun_bin;
use std::process::{Command, Stdio};

impl Fixture {
    /// A transcript: `$ command` lines, each followed by what it printed. Each command is run
    /// with the key it names held by a job of the test (and one finished run in its history),
    /// as in the transcript; what it prints must match in shape: the same first line of its
    /// report (the table's header, `key:`), the same log lines (level and message; an error
    /// shown is an error printed, and none other), and `echo $?` the same exit code.
    pub(super) fn run_transcript(&mut self, b: &Block) -> Result<(), String> {
        self.flush();
        let scratch = Scratch::new();
        let (map, _) = self.mapping(&b.body, &scratch);
        let body = substitute(&b.body, &map);
        let mut steps: Vec<(String, Vec<String>)> = Vec::new();
        for line in body.lines() {
            match line.strip_prefix("$ ") {
                Some(cmd) => steps.push((cmd.to_string(), Vec::new())),
                None if !line.trim().is_empty() => steps.last_mut().unwrap().1.push(line.into()),
                None => {}
            }
        }
        let mut holders = Vec::new();
        for (cmd, _) in &steps {
            let words = shell_words(cmd);
            if words.first().map(String::as_str) != Some("lockrun") {
                continue;
            }
            // The key or pattern after the operators' word; a pattern's first match.
            if let Some(key) = words
                .iter()
                .skip(2)
                .find(|w| !w.starts_with('-') && !w.contains(':'))
            {
                let key = key.replace('*', "eu");
                if !self.main.exists(&key) {
                    holders.push(self.hold(&key, &scratch));
                }
            }
        }
        let result = self.transcript_steps(&steps, &scratch);
        for mut h in holders {
            // SIGTERM, not SIGKILL: lockrun passes it on to its job's process group and
            // releases, so no `sleep` outlives the test.
            crate::support::kill(h.id(), libc::SIGTERM);
            let _ = h.wait();
        }
        result
    }

    /// A job of the test holding `key` (after one finished run of it, for the history).
    pub(super) fn hold(&self, key: &str, scratch: &Scratch) -> std::process::Child {
        let lockrun = |args: &[&str]| {
            let mut c = Command::new(lockrun_bin());
            c.args(["-r", &self.main.url(), key, "--"])
                .args(args)
                .env_clear()
                .env("PATH", "/usr/bin:/bin")
                .current_dir(&scratch.work)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            c
        };
        let done = lockrun(&["true"]).status().expect("run lockrun");
        assert!(done.success(), "a run of {key}: {done}");
        let child = lockrun(&["sleep", "60"]).spawn().expect("start lockrun");
        self.main
            .wait_until(&format!("{key} held"), |s| s.exists(key));
        child
    }

    pub(super) fn transcript_steps(
        &self,
        steps: &[(String, Vec<String>)],
        scratch: &Scratch,
    ) -> Result<(), String> {
        let mut last: Option<i32> = None;
        for (cmd, shown) in steps {
            if cmd.trim() == "echo $?" {
                let want = shown.first().map(String::as_str).unwrap_or_default();
                if last.map(|c| c.to_string()).as_deref() != Some(want) {
                    return Err(format!(
                        "`$ {cmd}` shows {want}, the command exited {last:?}"
                    ));
                }
                continue;
            }
            let out = Command::new("timeout")
                .args(["60", "bash", "-c", cmd])
                .current_dir(&scratch.work)
                .env_clear()
                .env("PATH", scratch.path())
                .env("HOME", &scratch.work)
                .env("LOCKRUN_REDIS_URL", self.main.url())
                .stdin(Stdio::null())
                .output()
                .expect("run bash");
            last = out.status.code();
            let stdout = String::from_utf8_lossy(&out.stdout);
            let stderr = String::from_utf8_lossy(&out.stderr);
            let fail = |what: String| Err(explain(&format!("`$ {cmd}`: {what}"), cmd, &out));
            let shown_report: Vec<&String> =
                shown.iter().filter(|l| log_line(l).is_none()).collect();
            if let Some(first) = shown_report.first() {
                let got = stdout.lines().next().unwrap_or_default();
                if squeeze(got) != squeeze(first) {
                    return fail(format!("its report should begin like {first:?}"));
                }
            }
            let printed: Vec<(String, String)> = stderr.lines().filter_map(log_line).collect();
            for want in shown.iter().filter_map(|l| log_line(l)) {
                if !printed.contains(&want) {
                    return fail(format!("no {} line {:?}", want.0, want.1));
                }
            }
            let shows_error = shown
                .iter()
                .any(|l| log_line(l).is_some_and(|(level, _)| level == "ERROR"));
            if !shows_error && printed.iter().any(|(level, _)| level == "ERROR") {
                return fail("an error the transcript does not show".into());
            }
        }
        Ok(())
    }

    /// An output block (marked `output`) below the shell block that prints it: each log line
    /// shown (level and message) is printed at least as many times as shown, and a table's
    /// header shown is printed as the header of a table.
    pub(super) fn compare_output(&self, b: &Block) -> Result<(), String> {
        let Some((file, out)) = self.last_run.as_ref().filter(|(f, _)| *f == b.file) else {
            return Err("an output block, but no shell block of this file was run above it".into());
        };
        let printed: Vec<(String, String)> = String::from_utf8_lossy(&out.stderr)
            .lines()
            .filter_map(log_line)
            .collect();
        let shown: Vec<(String, String)> = b.body.lines().filter_map(log_line).collect();
        for want in &shown {
            let n_shown = shown.iter().filter(|l| *l == want).count();
            let n_printed = printed.iter().filter(|l| *l == want).count();
            if n_printed < n_shown {
                return Err(explain(
                    &format!(
                        "shows {n_shown} {} line(s) {:?}, the block above ({file}) printed {n_printed}",
                        want.0, want.1
                    ),
                    "(the block above)",
                    out,
                ));
            }
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        for header in b.body.lines().filter(|l| is_table_header(l)) {
            if !stdout.lines().any(|l| squeeze(l) == squeeze(header)) {
                return Err(explain(
                    &format!("shows the header {header:?}, which the block above never printed"),
                    "(the block above)",
                    out,
                ));
            }
        }
        Ok(())
    }
}

/// A log line's level and message (the words before its first `field=`), or None.
pub(super) fn log_line(line: &str) -> Option<(String, String)> {
    let mut words = line.split_whitespace();
    words.next()?;
    let level = words.next()?;
    if !["INFO", "WARN", "ERROR"].contains(&level) {
        return None;
    }
    let message: Vec<&str> = words.take_while(|w| !w.contains('=')).collect();
    Some((level.to_string(), message.join(" ")))
}

/// A table's header: several words, all capitals.
pub(super) fn is_table_header(line: &str) -> bool {
    let words: Vec<&str> = line.split_whitespace().collect();
    words.len() >= 3
        && words
            .iter()
            .all(|w| w.chars().all(|c| c.is_ascii_uppercase()))
}

pub(super) fn squeeze(line: &str) -> String {
    line.split_whitespace().collect::<Vec<_>>().join(" ")
}
