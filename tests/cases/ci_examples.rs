//! The CI examples pass the validators their platforms' users run, not only a YAML parser: every
//! GitHub Actions workflow and GitLab CI file in README.md and docs/*.md (a `yaml` block whose
//! first line names where it goes: `# .github/workflows/NAME.yml`, `# .gitlab-ci.yml`) and any
//! the repository ships (`.github/workflows/`, `.gitlab-ci.yml`). A workflow must pass
//! actionlint, which runs shellcheck on its `run:` scripts, and zizmor (offline, its default
//! persona); a GitLab CI file must validate against GitLab's CI schema (check-jsonschema's
//! vendored copy, `--builtin-schema vendor.gitlab-ci`). Any finding fails the test, with the
//! validator's own report. The validators come from `tests/ensure-ci-linters.sh` (into
//! target/test-tools/ci-linters); without them the test fails saying how to get them.

use crate::support::doc_blocks::all_blocks;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    GithubWorkflow,
    GitlabCi,
}

/// One CI file: where it comes from (`file:line` of a block, or a repository path), what it
/// is, and its text.
struct Example {
    origin: String,
    kind: Kind,
    text: String,
}

/// What a file's path says it is.
fn kind_of(path: &str) -> Option<Kind> {
    if path.starts_with(".github/workflows/") && (path.ends_with(".yml") || path.ends_with(".yaml"))
    {
        Some(Kind::GithubWorkflow)
    } else if path == ".gitlab-ci.yml" {
        Some(Kind::GitlabCi)
    } else {
        None
    }
}

/// The documents' CI blocks and the repository's CI files. A YAML block that looks like a
/// CI file (`runs-on:`, `script:`) without naming its path is an error: it would go unchecked.
fn examples() -> Vec<Example> {
    let mut out = Vec::new();
    for b in all_blocks() {
        if !matches!(b.info.as_str(), "yaml" | "yml") {
            continue;
        }
        let origin = format!("{}:{}", b.file, b.line);
        let first = b.body.lines().next().unwrap_or_default();
        match first.strip_prefix("# ").and_then(|p| kind_of(p.trim())) {
            Some(kind) => out.push(Example {
                origin,
                kind,
                text: b.body.clone(),
            }),
            None => assert!(
                !b.body.contains("runs-on:") && !b.body.contains("script:"),
                "{origin}: a CI example whose first line does not name its path \
                 (`# .github/workflows/NAME.yml`, `# .gitlab-ci.yml`)"
            ),
        }
    }
    let workflows = root().join(".github/workflows");
    let mut shipped: Vec<String> = std::fs::read_dir(&workflows)
        .map(|d| {
            d.map(|e| {
                format!(
                    ".github/workflows/{}",
                    e.unwrap().file_name().to_string_lossy()
                )
            })
            .collect()
        })
        .unwrap_or_default();
    shipped.push(".gitlab-ci.yml".to_string());
    for path in shipped {
        if let (Some(kind), Ok(text)) =
            (kind_of(&path), std::fs::read_to_string(root().join(&path)))
        {
            out.push(Example {
                origin: path,
                kind,
                text,
            });
        }
    }
    out
}

/// A validator installed by tests/ensure-ci-linters.sh.
fn tool(name: &str) -> PathBuf {
    let path = root().join("target/test-tools/ci-linters/bin").join(name);
    assert!(
        path.is_file(),
        "{} not found: `bash tests/ensure-ci-linters.sh` (or `bash tests/run.sh`) installs \
         actionlint, zizmor and check-jsonschema into target/test-tools/ci-linters",
        path.display()
    );
    path
}

/// Runs `program` in `dir` on `file`; its report if it found anything (or failed).
fn validate(dir: &Path, program: &str, args: &[&str], file: &str) -> Result<(), String> {
    let out = Command::new(tool(program))
        .args(args)
        .arg(file)
        .current_dir(dir)
        // Nothing of the caller's GitHub credentials: zizmor stays offline anyway.
        .env_remove("GH_TOKEN")
        .env_remove("GITHUB_TOKEN")
        .env_remove("ZIZMOR_GITHUB_TOKEN")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    if out.status.success() {
        return Ok(());
    }
    Err(format!(
        "{program} ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    ))
}

/// Every validator's findings on `text`, a file of `kind`, each with its report.
fn findings(kind: Kind, text: &str) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let file = match kind {
        Kind::GithubWorkflow => ".github/workflows/example.yml",
        Kind::GitlabCi => ".gitlab-ci.yml",
    };
    let path = dir.path().join(file);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, text).unwrap();
    let shellcheck = tool("shellcheck").display().to_string();
    let runs: Vec<(&str, Vec<&str>)> = match kind {
        Kind::GithubWorkflow => vec![
            ("actionlint", vec!["-no-color", "-shellcheck", &shellcheck]),
            (
                "zizmor",
                vec![
                    "--offline",
                    "--no-config",
                    "--no-progress",
                    "--color",
                    "never",
                ],
            ),
        ],
        Kind::GitlabCi => vec![(
            "check-jsonschema",
            vec!["--builtin-schema", "vendor.gitlab-ci"],
        )],
    };
    runs.iter()
        .filter_map(|(program, args)| validate(dir.path(), program, args, file).err())
        .collect()
}

#[test]
fn the_ci_examples_pass_actionlint_zizmor_and_gitlabs_schema() {
    let examples = examples();
    for kind in [Kind::GithubWorkflow, Kind::GitlabCi] {
        assert!(
            examples.iter().any(|e| e.kind == kind),
            "no {kind:?} example found: the test would check nothing"
        );
    }
    let failures: Vec<String> = examples
        .iter()
        .flat_map(|e| {
            findings(e.kind, &e.text)
                .into_iter()
                .map(move |f| format!("{} ({:?}): {f}", e.origin, e.kind))
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// `text` with `from` replaced by `to`; `from` must be there, or the mutation tests nothing.
fn mutated(text: &str, from: &str, to: &str) -> String {
    assert!(text.contains(from), "{from:?} is not in the example");
    text.replacen(from, to, 1)
}

/// Each validator finds what it is there for in a spoiled copy of the documented examples: the
/// test above could not pass merely because a validator checks nothing.
#[test]
fn each_validator_reports_a_spoiled_copy() {
    let examples = examples();
    let github = &examples
        .iter()
        .find(|e| e.kind == Kind::GithubWorkflow)
        .unwrap()
        .text;
    let gitlab = &examples
        .iter()
        .find(|e| e.kind == Kind::GitlabCi)
        .unwrap()
        .text;
    let checkout = github
        .lines()
        .find_map(|l| l.trim().strip_prefix("- uses: "))
        .and_then(|u| u.split_whitespace().next())
        .expect("the workflow uses an action");
    let cases = [
        // actionlint: a runner label GitHub does not have.
        (
            Kind::GithubWorkflow,
            mutated(github, "runs-on: ubuntu-latest", "runs-on: ubuntu-lastest"),
            "[runner-label]",
        ),
        // actionlint's shellcheck: an unquoted expansion in a `run:` script.
        (
            Kind::GithubWorkflow,
            mutated(github, "-- ./deploy.sh", "-- ./deploy.sh $GITHUB_SHA"),
            "SC2086",
        ),
        // zizmor: an action referenced by a tag, which can be moved to other code.
        (
            Kind::GithubWorkflow,
            mutated(github, checkout, "actions/checkout@v6"),
            "unpinned-uses",
        ),
        // zizmor: a checkout that leaves the token in the workspace (its default).
        (
            Kind::GithubWorkflow,
            mutated(github, "persist-credentials: false", "{}"),
            "artipacked",
        ),
        // GitLab's schema: a job keyword GitLab does not know.
        (
            Kind::GitlabCi,
            mutated(gitlab, "\n  script:", "\n  scripts:"),
            "scripts",
        ),
    ];
    for (kind, text, expected) in cases {
        let found = findings(kind, &text).join("\n");
        assert!(
            found.contains(expected),
            "expected a finding {expected:?} in:\n{text}\ngot:\n{found}"
        );
    }
}
