//! lockrun's Lua scripts (`scripts/*.lua`), each with the name `EVALSHA` sends for it.
//!
//! Every text is fixed at compile time: what differs between deployments (the publish command
//! on a Cluster) is a script argument, so a script has one SHA-1 wherever it runs. `build.rs`
//! assembles each script from its files and computes its SHA-1 (its table says which files make
//! up which script); the statics below are its output.

/// One script: its text and the lowercase hex SHA-1 of it, as `SCRIPT LOAD` and `EVALSHA`
/// spell it.
pub struct Script {
    text: &'static str,
    sha: &'static str,
}

impl Script {
    const fn new(text: &'static str, sha: &'static str) -> Script {
        Script { text, sha }
    }

    pub fn text(&self) -> &'static str {
        self.text
    }

    pub fn sha(&self) -> &'static str {
        self.sha
    }
}

include!(concat!(env!("OUT_DIR"), "/scripts.rs"));

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
        // build.rs's names agree with the same digest computed here, at run time.
        for script in [&ACQUIRE, &RELEASE, &RENEW, &INSPECT] {
            let sha = sha1_smol::Sha1::from(script.text()).digest().to_string();
            assert_eq!(script.sha(), sha);
        }
        assert_ne!(ACQUIRE.sha(), RELEASE.sha());
        assert!(ACQUIRE
            .text()
            .starts_with(include_str!("scripts/prelude.lua")));
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
