//! The fenced code blocks of README.md and docs/*.md (not the generated benchmarks.md), with
//! the `<!-- example: … -->` marker above each: what the documents' examples tests
//! (tests/cases/doc_examples/, tests/cases/ci_examples.rs) run and check.

use std::path::PathBuf;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// One fenced code block.
pub struct Block {
    /// Relative to the repository root.
    pub file: String,
    /// The opening fence's line (1-based).
    pub line: usize,
    pub info: String,
    /// The text of a `<!-- example: … -->` comment above it, if any.
    pub marker: Option<String>,
    pub body: String,
}

/// README.md and docs/*.md but the generated benchmarks.md, sorted.
fn documents() -> Vec<String> {
    let mut docs: Vec<String> = std::fs::read_dir(root().join("docs"))
        .expect("docs/")
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md") && n != "benchmarks.md")
        .map(|n| format!("docs/{n}"))
        .collect();
    docs.sort();
    docs.insert(0, "README.md".to_string());
    docs
}

/// Every fenced block of `text`; a fence may be indented (a block inside a list item), and its
/// lines lose that indentation.
pub fn blocks_of(file: &str, text: &str) -> Vec<Block> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let trimmed = lines[i].trim_start();
        if !trimmed.starts_with("```") {
            i += 1;
            continue;
        }
        let indent = lines[i].len() - trimmed.len();
        let info = trimmed.trim_start_matches('`').trim().to_string();
        let marker = lines[..i]
            .iter()
            .rev()
            .find(|l| !l.trim().is_empty())
            .map(|l| l.trim())
            .and_then(|l| l.strip_prefix("<!-- example:"))
            .and_then(|l| l.strip_suffix("-->"))
            .map(|m| m.trim().to_string());
        let start = i;
        let mut body = String::new();
        i += 1;
        while i < lines.len() && !lines[i].trim_start().starts_with("```") {
            let l = lines[i];
            let cut = l.len() - l.trim_start().len();
            body.push_str(&l[cut.min(indent)..]);
            body.push('\n');
            i += 1;
        }
        assert!(i < lines.len(), "{file}:{}: fence never closed", start + 1);
        out.push(Block {
            file: file.to_string(),
            line: start + 1,
            info,
            marker,
            body,
        });
        i += 1;
    }
    out
}

pub fn all_blocks() -> Vec<Block> {
    documents()
        .iter()
        .flat_map(|f| {
            let text = std::fs::read_to_string(root().join(f)).expect("read document");
            blocks_of(f, &text)
        })
        .collect()
}

#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Marker {
    SyntaxOnly,
    Filter,
    Output,
}

pub fn marker(b: &Block) -> Result<Option<Marker>, String> {
    let Some(m) = &b.marker else { return Ok(None) };
    if let Some(why) = m.strip_prefix("syntax-only:") {
        if why.trim().is_empty() {
            return Err("a syntax-only marker must say why the block cannot run here".into());
        }
        return Ok(Some(Marker::SyntaxOnly));
    }
    if m.starts_with("filter:") {
        return Ok(Some(Marker::Filter));
    }
    if m == "output" {
        return Ok(Some(Marker::Output));
    }
    Err(format!("unknown marker <!-- example: {m} -->"))
}
