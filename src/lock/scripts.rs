//! lockrun's Lua scripts (`scripts/*.lua`), each with the name `EVALSHA` sends for it.
//!
//! Every text is fixed at compile time: what differs between deployments (the publish command
//! on a Cluster) is a script argument, so a script has one SHA-1 wherever it runs.

use std::sync::OnceLock;

/// One script: its text and, computed once per process when first sent, its SHA-1.
pub struct Script {
    text: &'static str,
    sha: OnceLock<String>,
}

impl Script {
    const fn new(text: &'static str) -> Script {
        Script {
            text,
            sha: OnceLock::new(),
        }
    }

    pub fn text(&self) -> &'static str {
        self.text
    }

    /// Lowercase hex SHA-1 of the text, as `SCRIPT LOAD` and `EVALSHA` spell it.
    pub fn sha(&self) -> &str {
        self.sha
            .get_or_init(|| sha1_smol::Sha1::from(self.text).digest().to_string())
    }
}

/// The scripts that write locks start with prelude.lua (clock, fence, history), then the waiter
/// queue's functions (queue.lua). Acquire and release put their common case (nobody queued)
/// between the two, so it returns before queue.lua's functions are created (every call creates
/// a script's `local function`s anew).
macro_rules! queue_script {
    ($file:literal) => {
        Script::new(concat!(
            include_str!("scripts/prelude.lua"),
            include_str!("scripts/queue.lua"),
            include_str!(concat!("scripts/", $file))
        ))
    };
    ($fast:literal, $queued:literal) => {
        Script::new(concat!(
            include_str!("scripts/prelude.lua"),
            include_str!(concat!("scripts/", $fast)),
            include_str!("scripts/queue.lua"),
            include_str!(concat!("scripts/", $queued))
        ))
    };
}

macro_rules! plain_script {
    ($file:literal) => {
        Script::new(include_str!(concat!("scripts/", $file)))
    };
}

pub static ACQUIRE: Script = queue_script!("acquire.lua", "acquire_queued.lua");
pub static RELEASE: Script = queue_script!("release.lua", "release_queued.lua");
pub static SEM_ACQUIRE: Script = queue_script!("sem_acquire.lua");
pub static SEM_RELEASE: Script = queue_script!("sem_release.lua");
pub static LEAVE: Script = queue_script!("leave.lua");
pub static FORCE_RELEASE: Script = queue_script!("force_release.lua");
pub static RENEW: Script = plain_script!("renew.lua");
pub static SEM_RENEW: Script = plain_script!("sem_renew.lua");
pub static HELD_BY: Script = plain_script!("held_by.lua");
pub static INSPECT: Script = plain_script!("inspect.lua");

/// The command that publishes a release hint: sharded pub/sub on a Cluster, so the hint stays
/// on the lock's shard (its channel shares the lock's slot, see `keys::wake_channel`) instead
/// of being broadcast to every node. Passed to the scripts that wake waiters.
pub fn publish_command(cluster: bool) -> &'static str {
    if cluster {
        "SPUBLISH"
    } else {
        "PUBLISH"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_script_is_named_by_the_sha1_of_its_text() {
        // `redis-cli SCRIPT LOAD "return 1"` answers this name.
        let one = Script::new("return 1");
        assert_eq!(one.sha(), "e0e1f9fabfc9d4800c877a703b823ac0578ff8db");
        assert_eq!(ACQUIRE.sha().len(), 40);
        assert_ne!(ACQUIRE.sha(), RELEASE.sha());
    }

    #[test]
    fn no_script_names_its_publish_command() {
        // The command comes from an argument: a text that named one would be rewritten or
        // wrong on a Cluster.
        for script in [
            &ACQUIRE,
            &RELEASE,
            &SEM_ACQUIRE,
            &SEM_RELEASE,
            &LEAVE,
            &FORCE_RELEASE,
        ] {
            assert!(!script.text().contains("PUBLISH'"), "{}", script.text());
        }
    }
}
