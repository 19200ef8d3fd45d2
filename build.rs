//! Assembles lockrun's Lua scripts (`src/lock/scripts/**/*.lua`) and names each by the SHA-1 of
//! its text, at compile time: `EVALSHA` sends the name on every request, and hashing the scripts
//! at every start would cost each run more than parsing its command line. The table below is
//! the one description of which files make up which script; `src/lock/scripts.rs` includes the
//! generated `scripts.rs` from OUT_DIR.
//!
//! The same SHA-1 implementation as the binary's (`sha1_smol`, a build dependency too).

use std::fmt::Write as _;
use std::path::Path;

/// Each script's files, under `src/lock/scripts/`: `acquire/`, `release/` and `renew/` hold
/// one file per kind of lock (`release/semaphore.lua` and `renew/semaphore.lua` serve the shared
/// holders too, kept as a semaphore's slots are), `lib/` what several scripts share. The
/// scripts that write locks start with `lib/prelude.lua` (clock, fence, history), then the
/// waiter queue's functions (`lib/queue.lua`). An exclusive acquire and release put their
/// common case (nobody queued) between the two, so it returns before the queue's functions are
/// created (every call creates a script's `local function`s anew).
#[rustfmt::skip]
const SCRIPTS: &[(&str, &[&str])] = &[
    ("ACQUIRE_EXCLUSIVE", &["lib/prelude", "acquire/exclusive", "lib/queue", "acquire/queued"]),
    ("ACQUIRE_SHARED", &["lib/prelude", "lib/queue", "acquire/shared"]),
    ("ACQUIRE_SEMAPHORE", &["lib/prelude", "lib/queue", "acquire/semaphore"]),
    ("ACQUIRE_TICK", &["lib/prelude", "lib/queue", "lib/tick", "acquire/tick"]),
    ("RELEASE_EXCLUSIVE", &["lib/prelude", "release/exclusive", "lib/queue", "release/queued"]),
    ("RELEASE_SEMAPHORE", &["lib/prelude", "lib/queue", "release/semaphore"]),
    ("RELEASE_TICK", &["lib/prelude", "lib/queue", "lib/tick", "release/tick"]),
    ("RENEW_EXCLUSIVE", &["renew/exclusive"]),
    ("RENEW_SEMAPHORE", &["renew/semaphore"]),
    ("LEAVE", &["lib/prelude", "lib/queue", "leave"]),
    ("FORCE_RELEASE", &["lib/prelude", "lib/queue", "force_release"]),
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
