//! `dockerfile` blocks (syntax-only): instructions, the path lockrun has in the image, and a
//! `CMD`'s lockrun arguments.

use super::fixture::Fixture;
use super::{root, Counts};
use crate::support::doc_blocks::Block;

impl Fixture {
    pub(super) fn check_dockerfile(
        &mut self,
        b: &Block,
        counts: &mut Counts,
    ) -> Result<(), String> {
        const INSTRUCTIONS: &[&str] = &[
            "FROM",
            "COPY",
            "ADD",
            "CMD",
            "ENTRYPOINT",
            "RUN",
            "ENV",
            "ARG",
            "WORKDIR",
            "USER",
        ];
        let image = std::fs::read_to_string(root().join("packaging/Dockerfile")).unwrap();
        for line in b.body.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (instruction, rest) = line.split_once(' ').unwrap_or((line, ""));
            if !INSTRUCTIONS.contains(&instruction) {
                return Err(format!("not a Dockerfile instruction: {line}"));
            }
            let words: Vec<&str> = rest.split_whitespace().collect();
            if instruction == "COPY" && words.first() == Some(&"--from=lockrun") {
                let src = words.get(1).copied().unwrap_or_default();
                if !image
                    .lines()
                    .any(|l| !l.starts_with('#') && l.contains(src))
                {
                    return Err(format!("lockrun's image has no {src}"));
                }
            }
            if instruction == "CMD" {
                let argv: Vec<String> = serde_json::from_str(rest)
                    .map_err(|e| format!("CMD is not a JSON list: {e}"))?;
                counts.lockrun_checked += 1;
                self.check_lockrun_args(&argv, &[])
                    .map_err(|e| format!("CMD {argv:?} as lockrun's arguments: {e}"))?;
            }
        }
        Ok(())
    }
}
