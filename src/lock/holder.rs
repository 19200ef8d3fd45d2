//! Who holds a lock: the holder's two names (the secret token and the public id), and the value
//! lockrun writes into the lock, `<id> host=<h> pid=<p> started=<utc> program=<name>`, made by
//! [`HolderValue::format`] and read back by [`HolderValue::parse`]. The Lua scripts read the
//! same value on the server (lib/prelude.lua's `holder_shaped`, lib/queue.lua's `note_skipped`,
//! held_by.lua): they mirror [`HolderValue::parse`].

use std::time::Duration;

/// Who we are, under two names. Reentrancy trusts whoever presents the holder's name, while
/// everything in Redis is readable by any client and every log line by any operator: so the
/// name that is trusted is never stored, published or logged, and the name that is shown
/// cannot be turned back into it.
#[derive(Clone, Debug)]
pub struct Holder {
    /// The secret: 128 random bits (UUID v4, hex). Given to the job alone (`LOCKRUN_TOKEN`);
    /// never sent to Redis, where `MONITOR` and `SLOWLOG` would show it to other clients.
    pub token: String,
    /// The public name: [`public_id`] of `token`. The lock value, semaphore members, waiter
    /// queue members and wake-up messages carry this; ownership is decided by it (a holder
    /// compares its own value or id), reentrancy by presenting a token that hashes to it.
    pub id: String,
    /// `<id> host=<h> pid=<p> started=<utc> program=<name>` ([`HolderValue`]): what
    /// `redis-cli GET <KEY>` shows.
    pub value: String,
    pub host: String,
    pub pid: u32,
    /// When this run began (with cron, when its host fired): a tick it opens is the
    /// schedule's, counted from here, not from whenever the opening attempt is made.
    pub since: tokio::time::Instant,
}

impl Holder {
    /// A fresh holder identity: 128 random bits from the OS (the secret token), the public id
    /// derived from it, plus who and where we are, and which program the lock is for.
    pub fn new(program: &std::ffi::OsStr) -> Holder {
        let token = uuid::Uuid::new_v4().simple().to_string();
        let id = public_id(&token);
        let host = nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
            .map(|h| one_word(&h))
            .unwrap_or_else(|| "unknown".into());
        let pid = std::process::id();
        let value = HolderValue {
            id: &id,
            host: &host,
            pid: &pid.to_string(),
            started: &crate::utc::now(),
            program: &program_name(program),
        }
        .format();
        Holder {
            token,
            id,
            value,
            host,
            pid,
            since: tokio::time::Instant::now(),
        }
    }
}

/// Lowercase hex SHA-1 of a token (as Redis Lua's `redis.sha1hex` would give it). The reentrancy
/// check hashes the token it was given and looks for the result, so the id itself is useless
/// as a token. SHA-1's known weakness is collisions, not preimages, and the token has 128
/// random bits: knowing the id gives no way back to the token.
pub fn public_id(token: &str) -> String {
    sha1_smol::Sha1::from(token).digest().to_string()
}

/// A holder value as lockrun writes it, in its parts: `<id> host=<h> pid=<p> started=<utc>
/// program=<name>`, one space apart, each part one word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HolderValue<'a> {
    /// The holder's [`public_id`].
    pub id: &'a str,
    pub host: &'a str,
    /// As written: lockrun writes its process id, but a value read back may say anything here.
    pub pid: &'a str,
    /// When the holder started, as [`crate::utc::format`] writes it.
    pub started: &'a str,
    /// The command's file name ([`program_name`]).
    pub program: &'a str,
}

impl<'a> HolderValue<'a> {
    /// The value to write into the lock.
    pub fn format(&self) -> String {
        format!(
            "{} host={} pid={} started={} program={}",
            self.id, self.host, self.pid, self.started, self.program
        )
    }

    /// `value` in its parts, if it has lockrun's shape: a first word, then exactly the words
    /// `host=`, `pid=`, `started=` and `program=`, in that order. A value lockrun did not write
    /// (set by hand, a reservation note) is `None`.
    pub fn parse(value: &'a str) -> Option<HolderValue<'a>> {
        let (id, rest) = value.split_once(' ')?;
        let mut words = rest.split(' ');
        let mut word = |prefix: &str| words.next()?.strip_prefix(prefix);
        let parts = HolderValue {
            id,
            host: word("host=")?,
            pid: word("pid=")?,
            started: word("started=")?,
            program: word("program=")?,
        };
        words.next().is_none().then_some(parts)
    }
}

/// What a log line may say about the holder whose value is `value`: `host=<h> pid=<p>
/// started=<utc> program=<name>`, without the first word (the holder's public id). A value
/// lockrun did not write (set by hand, a reservation note) is shown as it is; the logger
/// escapes it.
pub fn describe_holder(value: &str) -> &str {
    match HolderValue::parse(value) {
        Some(parts) => &value[parts.id.len() + 1..],
        None => value,
    }
}

/// When the holder whose value this is started (its `started=`), if lockrun wrote the value.
pub fn holder_started(value: &str) -> Option<std::time::SystemTime> {
    let secs = crate::utc::parse(HolderValue::parse(value)?.started)?;
    Some(std::time::UNIX_EPOCH + Duration::from_secs(secs))
}

/// The command's file name as one word of the holder value (what `lockrun status` shows):
/// only the last path component, as `ps` would show it (a directory may say more than its
/// operators want every client to read), at most 64 characters, anything that is not a
/// printable non-space character replaced by `?`.
pub fn program_name(program: &std::ffi::OsStr) -> String {
    let lossy = program.to_string_lossy();
    let base = lossy.rsplit('/').next().unwrap_or_default();
    let name = one_word(&base.chars().take(64).collect::<String>());
    if name.is_empty() {
        "?".into()
    } else {
        name
    }
}

fn one_word(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_control() || c.is_whitespace() {
                '?'
            } else {
                c
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holder_value_starts_with_the_public_id_and_never_shows_the_token() {
        let h = Holder::new(std::ffi::OsStr::new("job"));
        assert_eq!(h.token.len(), 32);
        assert_eq!(h.id, public_id(&h.token));
        assert!(h.value.starts_with(&format!("{} host=", h.id)));
        assert!(!h.value.contains(&h.token));
        assert_ne!(Holder::new(std::ffi::OsStr::new("job")).token, h.token);
    }

    #[test]
    fn a_holder_value_is_read_back_as_it_was_written() {
        let h = Holder::new(std::ffi::OsStr::new("/usr/local/bin/backup job.sh"));
        let parts = HolderValue::parse(&h.value).unwrap();
        assert_eq!(parts.id, h.id);
        assert_eq!(parts.host, h.host);
        assert_eq!(parts.pid, h.pid.to_string());
        assert_eq!(parts.program, "backup?job.sh");
        assert!(crate::utc::parse(parts.started).is_some());
        assert_eq!(parts.format(), h.value);
    }

    #[test]
    fn the_public_id_is_sha1_hex_as_redis_computes_it() {
        // FIPS 180 test vector; redis.sha1hex("abc") gives the same lowercase hex.
        assert_eq!(public_id("abc"), "a9993e364706816aba3e25717850c26c9cd0d89d");
        assert_eq!(public_id("").len(), 40);
    }

    #[test]
    fn a_holders_start_is_read_from_its_value() {
        let id = public_id("secret");
        let value = format!("{id} host=h1 pid=42 started=2024-01-02T03:04:05Z program=x");
        let secs = |v: &str| {
            holder_started(v).map(|t| t.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs())
        };
        assert_eq!(secs(&value), Some(1_704_164_645));
        // A value lockrun did not write says nothing about a start.
        assert_eq!(secs("started=2024-01-02T03:04:05Z"), None);
        assert_eq!(
            secs(&format!("{id} host=h1 pid=42 started=soon program=x")),
            None
        );
    }

    #[test]
    fn a_holder_is_described_without_its_first_word() {
        let id = public_id("secret");
        let value = format!("{id} host=h1 pid=42 started=2024-01-02T03:04:05Z program=backup.sh");
        assert_eq!(
            describe_holder(&value),
            "host=h1 pid=42 started=2024-01-02T03:04:05Z program=backup.sh"
        );
        // Anything else is shown as it is.
        for other in [
            "someone",
            "abc host=x",
            "reserved for a queued waiter",
            "a host=h pid=1 started=x",
            "a host=h pid=1 started=x extra",
            "a host=h pid=1 started=x program=p extra",
            "",
        ] {
            assert_eq!(describe_holder(other), other);
            assert_eq!(HolderValue::parse(other), None);
        }
    }
}
