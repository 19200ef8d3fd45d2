//! The source tree's shape: no circle between source files. A file may use its ancestors'
//! items (a parent module defines the seam its children implement); any other use makes an
//! edge, and no file may reach itself along those edges (`dispatch.rs` using `said.rs` using
//! `dispatch.rs` is what this forbids).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// A file's module path under `src/`: `src/lock/redis/link.rs` is `lock::redis::link`,
/// `src/lib.rs` and `src/main.rs` the crate itself, a `mod.rs` its folder.
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The code of a file that its module's build uses: comments and the unit tests left out.
fn code(text: &str) -> String {
    let text = text
        .split("#[cfg(test)]\nmod tests")
        .next()
        .unwrap_or_default();
    text.lines()
        .map(|l| l.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths a file's code names: `crate::a::b`, `super::x`, and each item of a
/// `use crate::a::{b, c::d}`, as lists of segments.
fn paths(code: &str) -> Vec<Vec<String>> {
    let word = |c: char| c.is_alphanumeric() || c == '_';
    let mut found = Vec::new();
    let chars: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let at_word_start = i == 0 || !word(chars[i - 1]);
        let rest: String = chars[i..chars.len().min(i + 7)].iter().collect();
        if at_word_start
            && ["crate::", "super::", "self::"]
                .iter()
                .any(|p| rest.starts_with(p))
        {
            let start = i;
            while i < chars.len() && (word(chars[i]) || chars[i] == ':') {
                i += 1;
            }
            let head: Vec<String> = chars[start..i]
                .iter()
                .collect::<String>()
                .split("::")
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect();
            if chars.get(i) == Some(&'{') {
                let close = chars[i..].iter().position(|&c| c == '}').map(|p| p + i);
                let inner: String = chars[i + 1..close.unwrap_or(i + 1)].iter().collect();
                for item in inner.split(',') {
                    let item = item.split(" as ").next().unwrap_or_default().trim();
                    let mut p = head.clone();
                    p.extend(
                        item.split("::")
                            .filter(|s| !s.is_empty())
                            .map(str::to_string),
                    );
                    found.push(p);
                }
            } else {
                found.push(head);
            }
        }
        i += 1;
    }
    found
}

/// The file a path in module `from` lands in: the longest module prefix that is a file.
fn file_of<'m>(
    modules: &'m BTreeMap<Vec<String>, PathBuf>,
    from: &[String],
    path: &[String],
) -> Option<&'m PathBuf> {
    let mut base: Vec<String> = Vec::new();
    let mut rest = path;
    match path.first().map(String::as_str) {
        Some("crate") => rest = &path[1..],
        Some("self") => {
            base = from.to_vec();
            rest = &path[1..];
        }
        Some("super") => {
            base = from.to_vec();
            while rest.first().map(String::as_str) == Some("super") {
                base.pop();
                rest = &rest[1..];
            }
        }
        _ => return None,
    }
    (0..=rest.len()).rev().find_map(|n| {
        let mut m = base.clone();
        m.extend_from_slice(&rest[..n]);
        modules.get(&m)
    })
}

#[test]
fn no_circle_between_source_files() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let modules: BTreeMap<Vec<String>, PathBuf> = files
        .iter()
        .map(|f| (module_of(&src, f), f.clone()))
        .collect();
    let mut edges: BTreeMap<PathBuf, BTreeSet<PathBuf>> = BTreeMap::new();
    for file in &files {
        let from = module_of(&src, file);
        let text = std::fs::read_to_string(file).unwrap();
        for path in paths(&code(&text)) {
            let Some(to) = file_of(&modules, &from, &path) else {
                continue;
            };
            let to_module = module_of(&src, to);
            let ancestor = to_module.len() < from.len() && from.starts_with(&to_module);
            if to != file && !ancestor {
                edges.entry(file.clone()).or_default().insert(to.clone());
            }
        }
    }
    // A circle: a file that reaches itself.
    let mut circles = Vec::new();
    for start in edges.keys() {
        let mut seen = BTreeSet::new();
        let mut stack: Vec<PathBuf> = edges[start].iter().cloned().collect();
        while let Some(f) = stack.pop() {
            if &f == start {
                circles.push(start.strip_prefix(&src).unwrap().display().to_string());
                break;
            }
            if seen.insert(f.clone()) {
                stack.extend(edges.get(&f).into_iter().flatten().cloned());
            }
        }
    }
    assert!(
        circles.is_empty(),
        "source files that reach themselves through their uses: {circles:?}"
    );
    // The check can see an edge: lib.rs uses the modules it declares.
    assert!(edges.len() > 20, "{} files with edges", edges.len());
}

#[test]
fn source_layout_unit_a_use_list_names_each_item() {
    let found = paths("use crate::lock::{backend::Backend, Holder};\nlet x = super::y::z(1);");
    assert_eq!(
        found,
        [
            vec!["crate", "lock", "backend", "Backend"],
            vec!["crate", "lock", "Holder"],
            vec!["super", "y", "z"],
        ]
    );
}
