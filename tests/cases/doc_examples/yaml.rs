//! `yaml` blocks (GitHub Actions, GitLab CI, Kubernetes; syntax-only): parsed, each shell line
//! checked, and every lockrun invocation run against the test's server with the job replaced.

use super::fixture::{explain, Fixture};
use super::shell::{check_shell_syntax, repo_paths, shell_words};
use super::{root, Counts, COPIES};
use crate::support::doc_blocks::Block;
use crate::support::lockrun_bin;
use std::collections::BTreeSet;
use std::process::{Command, Stdio};

impl Fixture {
    pub(super) fn check_yaml(&mut self, b: &Block, counts: &mut Counts) -> Result<(), String> {
        let doc: serde_yaml_ng::Value =
            serde_yaml_ng::from_str(&b.body).map_err(|e| format!("not YAML: {e}"))?;
        for (file, copy) in COPIES.iter().filter(|(f, _)| *f == b.file) {
            let shipped = std::fs::read_to_string(root().join(copy)).unwrap();
            let shipped: String = shipped
                .lines()
                .skip_while(|l| l.starts_with('#'))
                .map(|l| format!("{l}\n"))
                .collect();
            if b.info.starts_with("yaml") && shipped != b.body {
                return Err(format!("{file}'s block is no longer the same as {copy}"));
            }
        }
        let mut env = Vec::new();
        collect_env(&doc, &mut env);
        let defined: BTreeSet<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
        let mut lines = Vec::new();
        collect_shell_lines(&doc, &mut lines);
        for line in &lines {
            check_shell_syntax(line)?;
            for var in variables_used(line) {
                if !defined.contains(var.as_str()) {
                    return Err(format!(
                        "`{line}` uses ${var}, which the example does not define"
                    ));
                }
            }
            let words = shell_words(line);
            match words.first().map(String::as_str) {
                Some("lockrun") => {
                    counts.lockrun_checked += 1;
                    self.check_lockrun_args(&words[1..], &env)
                        .map_err(|e| format!("`{line}`: {e}"))?;
                }
                Some("cargo") if words.get(1).map(String::as_str) == Some("install") => {
                    check_cargo_install(&words).map_err(|e| format!("`{line}`: {e}"))?;
                }
                _ => {}
            }
        }
        let mut commands = Vec::new();
        collect_commands(&doc, &mut commands);
        for argv in &commands {
            counts.lockrun_checked += 1;
            self.check_lockrun_args(&argv[1..], &env)
                .map_err(|e| format!("command {argv:?}: {e}"))?;
        }
        for path in repo_paths(&b.body) {
            if !root().join(&path).exists() {
                return Err(format!("names {path}, which is not in the repository"));
            }
        }
        Ok(())
    }

    /// Runs lockrun with an example's arguments and `LOCKRUN_*` variables against the test's
    /// server, the job (everything after the first `--`) replaced by `true`: the options must
    /// parse and the run must say nothing beyond taking and releasing the lock (a warning on
    /// every run, such as a `--kill-after` above TTL/3, is a bad example).
    pub(super) fn check_lockrun_args(
        &mut self,
        args: &[String],
        env: &[(String, String)],
    ) -> Result<(), String> {
        let Some(dashes) = args.iter().position(|a| a == "--") else {
            return Err("no `--` between the key and the command".into());
        };
        self.flush();
        let mut cmd = Command::new(lockrun_bin());
        cmd.args(&args[..=dashes])
            .arg("true")
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .stdin(Stdio::null());
        for (k, v) in env.iter().filter(|(k, _)| k.starts_with("LOCKRUN_")) {
            cmd.env(k, v);
        }
        // Every example's Redis is a secret of the reader's: here, the test's server.
        cmd.env("LOCKRUN_REDIS_URL", self.main.url());
        let out = cmd.output().expect("run lockrun");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let expected = ["redis lock acquired, starting job", "redis lock released"];
        let unexpected: Vec<&str> = stderr
            .lines()
            .filter(|l| !expected.iter().any(|e| l.contains(e)))
            .collect();
        if out.status.code() != Some(0) || !unexpected.is_empty() {
            return Err(explain(
                "lockrun with these arguments",
                &format!("{cmd:?}"),
                &out,
            ));
        }
        Ok(())
    }
}

/// The `$NAME` and `${NAME}` a shell line expands.
pub(super) fn variables_used(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(i) = rest.find('$') {
        rest = &rest[i + 1..];
        let name: String = rest
            .trim_start_matches('{')
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if !name.is_empty() {
            out.push(name);
        }
    }
    out
}

/// `cargo install` of this package, reproducibly (`--locked`: the repository's Cargo.lock).
pub(super) fn check_cargo_install(words: &[String]) -> Result<(), String> {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let package = manifest
        .lines()
        .find_map(|l| l.strip_prefix("name = "))
        .map(|n| n.trim_matches('"'))
        .unwrap();
    if words.last().map(String::as_str) != Some(package) {
        return Err(format!("does not install the package {package}"));
    }
    if !words.iter().any(|w| w == "--locked") {
        return Err("without --locked it builds with other dependencies than tested".into());
    }
    // `--locked` needs the lock file committed beside the manifest.
    if !root().join("Cargo.lock").is_file() {
        return Err("--locked needs Cargo.lock at the repository's root".into());
    }
    Ok(())
}

pub(super) fn yaml_string(v: &serde_yaml_ng::Value) -> Option<String> {
    match v {
        serde_yaml_ng::Value::String(s) => Some(s.clone()),
        serde_yaml_ng::Value::Number(n) => Some(n.to_string()),
        serde_yaml_ng::Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Every variable an example defines: `env:`/`variables:` mappings (Actions, GitLab) and
/// `env:` lists of `name`/`value` (Kubernetes). A value from a secret (`${{ secrets.… }}`,
/// `valueFrom`) is defined but has no value here.
pub(super) fn collect_env(v: &serde_yaml_ng::Value, out: &mut Vec<(String, String)>) {
    match v {
        serde_yaml_ng::Value::Mapping(m) => {
            for (k, val) in m {
                let key = k.as_str().unwrap_or_default();
                match (key, val) {
                    ("env" | "variables", serde_yaml_ng::Value::Mapping(vars)) => {
                        for (name, value) in vars {
                            let value = yaml_string(value).unwrap_or_default();
                            let value = if value.contains("${{") {
                                String::new()
                            } else {
                                value
                            };
                            out.push((name.as_str().unwrap_or_default().to_string(), value));
                        }
                    }
                    ("env", serde_yaml_ng::Value::Sequence(list)) => {
                        for item in list {
                            let name = item["name"].as_str().unwrap_or_default().to_string();
                            let value = yaml_string(&item["value"]).unwrap_or_default();
                            out.push((name, value));
                        }
                    }
                    _ => collect_env(val, out),
                }
            }
        }
        serde_yaml_ng::Value::Sequence(s) => s.iter().for_each(|x| collect_env(x, out)),
        _ => {}
    }
}

/// The shell lines an example runs: Actions' `run:`, GitLab's `script:` and friends.
pub(super) fn collect_shell_lines(v: &serde_yaml_ng::Value, out: &mut Vec<String>) {
    match v {
        serde_yaml_ng::Value::Mapping(m) => {
            for (k, val) in m {
                match (k.as_str().unwrap_or_default(), val) {
                    ("run", serde_yaml_ng::Value::String(s)) => {
                        out.extend(s.lines().map(String::from))
                    }
                    (
                        "script" | "before_script" | "after_script",
                        serde_yaml_ng::Value::Sequence(l),
                    ) => out.extend(l.iter().filter_map(yaml_string)),
                    _ => collect_shell_lines(val, out),
                }
            }
        }
        serde_yaml_ng::Value::Sequence(s) => s.iter().for_each(|x| collect_shell_lines(x, out)),
        _ => {}
    }
}

/// A container's `command:` (and `args:`) that runs lockrun.
pub(super) fn collect_commands(v: &serde_yaml_ng::Value, out: &mut Vec<Vec<String>>) {
    match v {
        serde_yaml_ng::Value::Mapping(m) => {
            if let Some(serde_yaml_ng::Value::Sequence(c)) = m.get("command") {
                let mut argv: Vec<String> = c.iter().filter_map(yaml_string).collect();
                if let Some(serde_yaml_ng::Value::Sequence(a)) = m.get("args") {
                    argv.extend(a.iter().filter_map(yaml_string));
                }
                if argv.first().map(String::as_str) == Some("lockrun") {
                    out.push(argv);
                }
            }
            m.values().for_each(|x| collect_commands(x, out));
        }
        serde_yaml_ng::Value::Sequence(s) => s.iter().for_each(|x| collect_commands(x, out)),
        _ => {}
    }
}
