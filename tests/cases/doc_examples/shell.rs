//! Shell blocks: run whole with `bash -e` (`sh`, `bash`, `shell`), checked for syntax, commands
//! and paths when marked syntax-only, or fed lockrun's stderr when marked as a filter.

use super::fixture::{explain, substitute, Fixture, Scratch, PING_HOST};
use super::{root, NEVER_RUN, OUTSIDE_TOOLS, STAND_INS};
use crate::support::doc_blocks::Block;
use crate::support::lockrun_bin;
use std::process::{Command, Stdio};

impl Fixture {
    pub(super) fn run_shell(&mut self, b: &Block) -> Result<(), String> {
        let words: Vec<String> = b.body.lines().flat_map(shell_words).collect();
        if let Some(w) = words.iter().find(|w| NEVER_RUN.contains(&w.as_str())) {
            return Err(format!(
                "not run here ({w}): mark it <!-- example: syntax-only: WHY --> to have it checked"
            ));
        }
        self.flush();
        let scratch = Scratch::new();
        let (map, reach) = self.mapping(&b.body, &scratch);
        let pings_before = self.pings();
        let script = substitute(&b.body, &map);
        let out = Command::new("timeout")
            .args(["60", "bash", "-e", "-c", &script])
            .current_dir(&scratch.work)
            .env_clear()
            .env("PATH", scratch.path())
            .env("HOME", &scratch.work)
            .env("REDIS", self.main.url())
            .env("LOCKRUN_REDIS_URL", self.main.url())
            .stdin(Stdio::null())
            .output()
            .expect("run bash");
        self.last_run = Some((b.file.clone(), out.clone()));
        if !out.status.success() {
            return Err(explain("the block failed", &script, &out));
        }
        for job in STAND_INS.iter().filter(|j| b.body.contains(**j)) {
            if scratch.runs(job) == 0 {
                return Err(explain(&format!("{job} never ran"), &script, &out));
            }
        }
        if b.body.contains("lockrun") && !self.reached(reach) {
            return Err(explain(
                "lockrun never reached the test's server",
                &script,
                &out,
            ));
        }
        if b.body.contains(PING_HOST) && self.pings() == pings_before {
            return Err(explain("no ping reached the monitor", &script, &out));
        }
        Ok(())
    }

    /// What lockrun writes on stderr, errors and not, in both formats.
    pub(super) fn error_lines(&mut self) -> (String, Vec<String>, Vec<String>) {
        if let Some(e) = &self.error_lines {
            return e.clone();
        }
        let runs: &[&[&str]] = &[
            &["-r", &self.main.url(), "doc-filter", "--", "true"],
            &["--no-such-flag", "doc-filter", "--", "true"],
            &["--ttl", "soon", "doc-filter", "--", "true"],
            &["-r", "redis://127.0.0.1:1", "doc-filter", "--", "true"],
            &["-r", "http://x", "doc-filter", "--", "true"],
            &[
                "-r",
                &self.main.url(),
                "doc-filter",
                "--",
                "/nonexistent/job",
            ],
        ];
        let mut all = String::new();
        for format in ["text", "json"] {
            for args in runs {
                let out = Command::new(lockrun_bin())
                    .args(*args)
                    .env_clear()
                    .env("PATH", "/usr/bin:/bin")
                    .env("LOCKRUN_LOG_FORMAT", format)
                    .stdin(Stdio::null())
                    .output()
                    .expect("run lockrun");
                all.push_str(&String::from_utf8_lossy(&out.stderr));
            }
        }
        let mut text = Vec::new();
        let mut json = Vec::new();
        for line in all.lines() {
            if line.starts_with('{') {
                let v: serde_json::Value = serde_json::from_str(line)
                    .unwrap_or_else(|e| panic!("lockrun wrote a bad JSON line {line:?}: {e}"));
                if v["level"] == "ERROR" {
                    json.push(line.to_string());
                }
            } else if line.split_whitespace().nth(1) == Some("ERROR") {
                text.push(line.to_string());
            }
        }
        assert!(
            text.len() >= 4 && json.len() >= 4,
            "the failing runs should each write an error line:\n{all}"
        );
        self.error_lines = Some((all, text, json));
        self.error_lines.clone().unwrap()
    }

    pub(super) fn run_filters(&mut self, b: &Block) -> Result<(), String> {
        let (input, text, json) = self.error_lines();
        for line in b.body.lines().filter(|l| !l.trim().is_empty()) {
            let mut child = Command::new("bash")
                .args(["-c", line])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("run filter");
            use std::io::Write;
            child
                .stdin
                .take()
                .unwrap()
                .write_all(input.as_bytes())
                .unwrap();
            let out = child.wait_with_output().unwrap();
            let got: Vec<String> = String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(String::from)
                .collect();
            if got != text && got != json {
                return Err(explain(
                    &format!(
                        "should print exactly the error lines of one format; the input was:\n{input}"
                    ),
                    line,
                    &out,
                ));
            }
        }
        Ok(())
    }
}

/// `bash -n`, then: every command exists, every repository path exists.
pub(super) fn check_shell_syntax(script: &str) -> Result<(), String> {
    let out = Command::new("bash")
        .args(["-n", "-c", script])
        .output()
        .expect("bash -n");
    if !out.status.success() {
        return Err(explain("bash -n", script, &out));
    }
    for line in script.lines() {
        let words = shell_words(line);
        let command = words
            .iter()
            .map(String::as_str)
            .find(|w| !is_assignment(w) && *w != "sudo");
        let Some(command) = command else { continue };
        let known = command == "lockrun"
            || STAND_INS.contains(&command)
            || OUTSIDE_TOOLS.contains(&command)
            || root().join(command).is_file()
            || Command::new("bash")
                .args(["-c", "command -v \"$1\" >/dev/null", "-", command])
                .status()
                .expect("bash")
                .success();
        if !known {
            return Err(format!("`{line}`: no command {command}"));
        }
    }
    for path in repo_paths(script) {
        if !root().join(&path).exists() {
            return Err(format!("names {path}, which is not in the repository"));
        }
    }
    Ok(())
}

/// `NAME=value`, a variable for the command that follows.
pub(super) fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// The words of a shell line up to a comment, quotes removed (enough for the docs' lines:
/// no escapes, no expansions checked here).
pub(super) fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    for c in line.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => word.push(c),
            None if c == '\'' || c == '"' => {
                quote = Some(c);
                in_word = true;
            }
            None if c == '#' && !in_word => break,
            None if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            None => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

/// The repository paths a text names (under the repository's own top-level directories).
pub(super) fn repo_paths(text: &str) -> Vec<String> {
    const TOP: &[&str] = &["tests/", "packaging/", "docs/", "src/", "examples/"];
    text.split(|c: char| c.is_whitespace() || "\"'()$=,;`".contains(c))
        .filter(|w| TOP.iter().any(|t| w.starts_with(t)))
        .map(|w| w.trim_end_matches(['.', ':']).to_string())
        .collect()
}
