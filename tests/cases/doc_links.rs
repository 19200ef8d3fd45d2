//! Every relative link in README.md and docs/*.md resolves: the file exists, and a `#anchor`
//! names a heading of that file as GitHub slugs it. The README is a front door that points into
//! the documents; a section renamed or moved in one of them must not leave a dead link behind.
//! Links inside code (fenced blocks, inline code) are text, not links, and are not checked.
//!
//! The same holds for contributing.md's layout, where a newcomer looks a test file up: every
//! file of `tests/cases/` and `tests/support/` has its row there, and every `tests/` path a row
//! names exists.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every docs/*.md, sorted.
fn documents() -> Vec<PathBuf> {
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    docs.insert(0, root().join("README.md"));
    docs
}

/// The lines of `text` outside fenced code blocks, with inline code spans blanked out, each
/// with its line number.
fn prose(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut fence: Option<&str> = None;
    for (n, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let marker = ["```", "~~~"].into_iter().find(|m| trimmed.starts_with(m));
        match (fence, marker) {
            (None, Some(m)) => fence = Some(m),
            (Some(open), Some(m)) if open == m => fence = None,
            (None, None) => out.push((n + 1, without_code_spans(line))),
            _ => {}
        }
    }
    out
}

/// `line` with every `` `…` `` span replaced by spaces.
fn without_code_spans(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
            out.push(' ');
        } else if in_code {
            out.push(' ');
        } else {
            out.push(c);
        }
    }
    out
}

/// The targets of the `[text](target)` links on a line.
fn link_targets(line: &str) -> Vec<String> {
    let mut targets = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        match after.find(')') {
            Some(end) => {
                let target = after[..end].split_whitespace().next().unwrap_or("");
                targets.push(target.to_string());
                rest = &after[end..];
            }
            None => break,
        }
    }
    targets
}

/// A heading's anchor as GitHub makes it: lower case, punctuation dropped (letters, digits,
/// `-`, `_` and spaces kept), spaces turned into `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Every anchor of a Markdown file: its headings' slugs, a repeated one numbered `-1`, `-2` as
/// GitHub numbers it.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    // Headings are read from the raw lines (code spans kept: their text is part of the slug).
    let mut fence: Option<&str> = None;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if let Some(m) = ["```", "~~~"].into_iter().find(|m| trimmed.starts_with(m)) {
            fence = match fence {
                None => Some(m),
                Some(open) if open == m => None,
                other => other,
            };
            continue;
        }
        if fence.is_some() {
            continue;
        }
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if (1..=6).contains(&hashes) && line[hashes..].starts_with(' ') {
            let base = slug(&line[hashes..]);
            let mut anchor = base.clone();
            let mut n = 0;
            while seen.contains(&anchor) {
                n += 1;
                anchor = format!("{base}-{n}");
            }
            seen.insert(anchor);
        }
    }
    seen
}

/// What is wrong with one link of `doc`, if anything.
fn check(doc: &Path, target: &str) -> Option<String> {
    if target.is_empty() {
        return Some("an empty link".into());
    }
    if target.contains("://") || target.starts_with("mailto:") {
        return None;
    }
    let (file, anchor) = match target.split_once('#') {
        Some((f, a)) => (f, Some(a)),
        None => (target, None),
    };
    let path = if file.is_empty() {
        doc.to_path_buf()
    } else {
        doc.parent().unwrap().join(file)
    };
    if !path.exists() {
        return Some(format!("{} does not exist", path.display()));
    }
    let anchor = anchor?;
    if path.extension().is_none_or(|x| x != "md") {
        return Some(format!(
            "an anchor into {}, which is not Markdown",
            path.display()
        ));
    }
    let text = std::fs::read_to_string(&path).unwrap();
    if anchors(&text).contains(anchor) {
        None
    } else {
        Some(format!("{} has no heading #{anchor}", path.display()))
    }
}

#[test]
fn every_relative_link_in_the_docs_resolves() {
    let docs = documents();
    for wanted in [
        "guide.md",
        "availability.md",
        "safety.md",
        "installing.md",
        "contributing.md",
        "benchmarks.md",
    ] {
        assert!(
            docs.iter()
                .any(|d| d.ends_with(Path::new("docs").join(wanted))),
            "docs/{wanted} is missing (the README links to it)"
        );
    }
    let mut broken = Vec::new();
    let mut checked = 0;
    for doc in &docs {
        let text = std::fs::read_to_string(doc).unwrap();
        let name = doc.strip_prefix(root()).unwrap().display().to_string();
        for (n, line) in prose(&text) {
            for target in link_targets(&line) {
                checked += 1;
                if let Some(why) = check(doc, &target) {
                    broken.push(format!("{name}:{n}: ({target}): {why}"));
                }
            }
        }
    }
    assert!(
        checked > 20,
        "only {checked} links found: is the parser broken?"
    );
    assert!(
        broken.is_empty(),
        "broken links in the documents:\n{}",
        broken.join("\n")
    );
}

/// The rows of the tables in a document's `## Layout` section (up to the next `## ` heading):
/// each row's first cell, and the rest of the row.
fn layout_rows(doc: &str) -> Vec<(String, String)> {
    doc.lines()
        .skip_while(|l| l.trim_end() != "## Layout")
        .skip(1)
        .take_while(|l| !l.starts_with("## "))
        .filter_map(|l| {
            let (first, rest) = l.strip_prefix('|')?.split_once('|')?;
            Some((first.trim().to_string(), rest.to_string()))
        })
        .collect()
}

/// The code spans of a cell: `a.rs` and `b/` of "`a.rs`, `b/` and c".
fn code_spans(cell: &str) -> Vec<&str> {
    cell.split('`').skip(1).step_by(2).collect()
}

/// What the layout lacks: the files (paths from the repository's root) no row names, and the
/// `tests/` paths rows name that `exists` denies. A row names a file by its path in its first
/// cell, or by its folder there (`tests/support/chaos/`) and its file name in the rest of the
/// row (`recorder.rs`).
fn layout_gaps(
    doc: &str,
    files: &[String],
    exists: impl Fn(&str) -> bool,
) -> (Vec<String>, Vec<String>) {
    let rows = layout_rows(doc);
    let unnamed = files
        .iter()
        .filter(|file| {
            let (dir, name) = file.rsplit_once('/').unwrap();
            let folder = format!("{dir}/");
            !rows.iter().any(|(first, rest)| {
                let spans = code_spans(first);
                spans.contains(&file.as_str())
                    || (spans.contains(&folder.as_str()) && code_spans(rest).contains(&name))
            })
        })
        .cloned()
        .collect();
    let mut named = Vec::new();
    for (first, rest) in &rows {
        for span in code_spans(first) {
            if !span.starts_with("tests/") || span.contains('*') {
                continue;
            }
            named.push(span.to_string());
            if span.ends_with('/') {
                // A folder's row: the file names in it are its files.
                let own = code_spans(rest)
                    .into_iter()
                    .filter(|n| !n.contains('/') && n.contains('.') && !n.contains(' '));
                named.extend(own.map(|n| format!("{span}{n}")));
            }
        }
    }
    let stale = named.into_iter().filter(|p| !exists(p)).collect();
    (unnamed, stale)
}

/// The files under `dir` (a path from the repository's root), recursively, sorted.
fn files_under(dir: &str) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(root().join(dir)).unwrap_or_else(|e| panic!("{dir}: {e}")) {
        let entry = entry.unwrap();
        let path = format!("{dir}/{}", entry.file_name().to_string_lossy());
        if entry.file_type().unwrap().is_dir() {
            out.extend(files_under(&path));
        } else {
            out.push(path);
        }
    }
    out.sort();
    out
}

#[test]
fn every_test_file_has_its_row_in_the_layout() {
    let doc = std::fs::read_to_string(root().join("docs/contributing.md")).unwrap();
    let mut files = files_under("tests/cases");
    files.extend(files_under("tests/support"));
    assert!(
        files.len() > 40,
        "{} files under tests/cases and tests/support: is the listing broken?",
        files.len()
    );
    let (unnamed, stale) = layout_gaps(&doc, &files, |p| root().join(p).exists());
    assert!(
        unnamed.is_empty() && stale.is_empty(),
        "docs/contributing.md's ## Layout (one row per file or folder under tests/):\n\
         files without a row: {unnamed:?}\n\
         paths named that do not exist: {stale:?}"
    );
}

#[test]
fn doc_links_unit_slugs_and_parsing() {
    assert_eq!(
        slug(" CI: serialize deploys across pipelines"),
        "ci-serialize-deploys-across-pipelines"
    );
    assert_eq!(slug(" Hosts: .deb, .rpm, tarball"), "hosts-deb-rpm-tarball");
    assert_eq!(
        slug(" Keeping the password out of the crontab and `ps`"),
        "keeping-the-password-out-of-the-crontab-and-ps"
    );
    assert_eq!(
        slug(" Availability: Sentinel, Cluster, replicas"),
        "availability-sentinel-cluster-replicas"
    );
    let a = anchors("# A\n## Notes\n```sh\n# not a heading\n```\n### Notes\n#nope\n");
    assert_eq!(
        a,
        ["a", "notes", "notes-1"]
            .map(String::from)
            .into_iter()
            .collect()
    );
    assert_eq!(
        link_targets("see [x](a.md#b) and [`y`](#c \"title\"), [z](http://e)"),
        ["a.md#b", "#c", "http://e"]
    );
    assert_eq!(
        prose("[a](x)\n```\n[b](y)\n```\n`[c](z)` [d](w)\n")
            .iter()
            .flat_map(|(_, l)| link_targets(l))
            .collect::<Vec<_>>(),
        ["x", "w"]
    );
}

#[test]
fn doc_links_unit_layout_rows() {
    let layout = "## Layout\n\n| path | what |\n|---|---|\n| `tests/a.rs`, `tests/b.c` | x |\n\
                  | `tests/d/` | `mod.rs` the rest, `gone.rs` |\n| `tests/e-*.sh` | y |\n\n\
                  ## Next\n\n| `tests/f.rs` | after the section |\n";
    let files = [
        "tests/a.rs",
        "tests/b.c",
        "tests/d/mod.rs",
        "tests/d/new.rs",
        "tests/f.rs",
    ]
    .map(String::from);
    let (unnamed, stale) = layout_gaps(layout, &files, |p| files.iter().any(|f| f.starts_with(p)));
    assert_eq!(unnamed, ["tests/d/new.rs", "tests/f.rs"]);
    assert_eq!(stale, ["tests/d/gone.rs"]);
}
