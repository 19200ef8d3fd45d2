//! Assembles lockrun's Lua scripts (`src/lock/scripts/*.lua`) and names each by the SHA-1 of
//! its text, at compile time: `EVALSHA` sends the name on every request, and hashing the scripts
//! at every start would cost each run more than parsing its command line. The table below is
//! the one description of which files make up which script; `src/lock/scripts.rs` includes the
//! generated `scripts.rs` from OUT_DIR.
//!
//! The same SHA-1 implementation as the binary's (`sha1_smol`, a build dependency too).

use std::fmt::Write as _;
use std::path::Path;

/// The scripts that write locks start with prelude.lua (clock, fence, history), then the waiter
/// queue's functions (queue.lua). Acquire and release put their common case (nobody queued)
/// between the two, so it returns before queue.lua's functions are created (every call creates
/// a script's `local function`s anew).
#[rustfmt::skip]
const SCRIPTS: &[(&str, &[&str])] = &[
    ("ACQUIRE", &["prelude", "acquire", "queue", "acquire_queued"]),
    ("RELEASE", &["prelude", "release", "queue", "release_queued"]),
    ("ACQUIRE_TICK", &["prelude", "queue", "tick", "acquire_tick"]),
    ("RELEASE_TICK", &["prelude", "queue", "tick", "release_tick"]),
    ("SEM_ACQUIRE", &["prelude", "queue", "sem_acquire"]),
    ("SHARED_ACQUIRE", &["prelude", "queue", "shared_acquire"]),
    ("SEM_RELEASE", &["prelude", "queue", "sem_release"]),
    ("LEAVE", &["prelude", "queue", "leave"]),
    ("FORCE_RELEASE", &["prelude", "queue", "force_release"]),
    ("RENEW", &["renew"]),
    ("SEM_RENEW", &["sem_renew"]),
    ("HELD_BY", &["held_by"]),
    ("INSPECT", &["inspect"]),
];

fn main() {
    let dir = Path::new("src/lock/scripts");
    let out = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    let mut rust = String::new();
    for (name, parts) in SCRIPTS {
        let mut text = String::new();
        for part in *parts {
            let path = dir.join(format!("{part}.lua"));
            println!("cargo:rerun-if-changed={}", path.display());
            text.push_str(
                &std::fs::read_to_string(&path)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display())),
            );
        }
        let file = format!("{}.lua", name.to_lowercase());
        std::fs::write(Path::new(&out).join(&file), &text).expect("writing to OUT_DIR");
        let sha = sha1_smol::Sha1::from(&text).digest().to_string();
        writeln!(
            rust,
            "pub static {name}: Script = Script::new(include_str!(concat!(env!(\"OUT_DIR\"), \"/{file}\")), \"{sha}\");"
        )
        .unwrap();
    }
    println!("cargo:rerun-if-changed=build.rs");
    std::fs::write(Path::new(&out).join("scripts.rs"), rust).expect("writing to OUT_DIR");
}
