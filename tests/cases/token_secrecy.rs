//! The holder's secret: `LOCKRUN_TOKEN` is what reentrancy trusts, so nothing an operator or
//! another Redis client can see (log lines, the key's value, the waiter queue, wake-up messages,
//! semaphore members) may contain it, and what they do see must not pass the reentrancy check.

use crate::support::*;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};

/// A file the job writes its `LOCKRUN_TOKEN` to (via rename, so a reader never sees it half
/// written), and a file whose creation lets the job end: the test decides when it releases.
struct Holding {
    child: Child,
    lines: Lines,
    token_file: PathBuf,
    go: PathBuf,
}

impl Holding {
    /// Starts `lockrun [extra] KEY -- <job>` and returns once the job has published its token.
    fn start(redis: &Server, name: &str, extra: &[&str], key: &str) -> Holding {
        let dir = redis.dir.path();
        let token_file = dir.join(format!("{name}.token"));
        let go = dir.join(format!("{name}.go"));
        let script = format!(
            "echo \"$LOCKRUN_TOKEN\" > '{t}.tmp' && mv '{t}.tmp' '{t}'; \
             while [ ! -e '{g}' ]; do sleep 0.02; done",
            t = token_file.display(),
            g = go.display()
        );
        let mut cmd = Lockrun::on(redis);
        cmd.args(extra)
            .args([key, "--", "sh", "-c", &script])
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        let lines = wait_for_line(&mut child, "redis lock acquired");
        wait_for_file_of(&mut child, &token_file);
        Holding {
            child,
            lines,
            token_file,
            go,
        }
    }

    fn token(&self) -> String {
        read_token(&self.token_file)
    }

    /// Lets the job end and returns lockrun's exit code and log.
    fn finish(mut self) -> (Option<i32>, String) {
        std::fs::write(&self.go, "").unwrap();
        let code = wait_timeout(&mut self.child, PATIENCE)
            .expect("holder exits once told to")
            .code();
        (code, self.lines.rest())
    }
}

fn read_token(path: &Path) -> String {
    let token = std::fs::read_to_string(path).unwrap().trim().to_string();
    // Guards the test itself: an empty token would be "contained" in everything.
    assert_eq!(
        token.len(),
        32,
        "LOCKRUN_TOKEN is 128 bits in hex: {token:?}"
    );
    token
}

/// The first word of a holder value: the holder's id, which anyone who can read the key has,
/// so a forged LOCKRUN_TOKEN to try against the reentrancy check.
fn first_word(value: &str) -> String {
    value
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

fn conflict_line(out: &std::process::Output) -> String {
    let err = stderr_of(out);
    err.lines()
        .find(|l| l.contains("redis lock already acquired"))
        .unwrap_or_else(|| panic!("no conflict line: {err}"))
        .to_string()
}

#[test]
fn a_conflict_log_line_names_host_and_pid_but_never_the_token() {
    let redis = Server::start();
    let holding = Holding::start(&redis, "h", &[], "logged");
    let token = holding.token();
    let value: String = redis.cmd(&["GET", "logged"]);
    let id = first_word(&value);

    let mut cmd = Lockrun::on(&redis);
    cmd.args(["logged", "echo", "ran"]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(75), "{}", stderr_of(&out));
    let line = conflict_line(&out);
    assert!(!line.contains(&token), "the token leaked: {line}");
    assert!(!line.contains(&id), "the holder id is shown: {line}");
    let pid = format!("pid={}", holding.child.id());
    assert!(line.contains("host=") && line.contains(&pid), "{line}");
    assert!(line.contains("started="), "{line}");

    // The "waiting" line of a --wait lockrun names the holder the same way.
    let mut cmd = Lockrun::on(&redis);
    cmd.args(["--wait", "300ms", "logged", "echo", "ran"]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(75), "{}", stderr_of(&out));
    let err = stderr_of(&out);
    for line in err.lines().filter(|l| l.contains("already acquired")) {
        assert!(!line.contains(&token) && !line.contains(&id), "{line}");
        assert!(line.contains(&pid), "{line}");
    }

    let (code, _) = holding.finish();
    assert_eq!(code, Some(0));
}

#[test]
fn the_key_value_shows_who_holds_it_but_not_the_token() {
    let redis = Server::start();
    let holding = Holding::start(&redis, "h", &[], "shown");
    let token = holding.token();
    let value: String = redis.cmd(&["GET", "shown"]);
    assert!(!value.contains(&token), "GET shows the token: {value}");
    // Still the shape operators read: `<id> host=<h> pid=<p> started=<utc> program=<name>`.
    let words: Vec<&str> = value.split(' ').collect();
    assert_eq!(words.len(), 5, "{value}");
    assert_eq!(words[0].len(), 40, "a SHA-1 in hex: {value}");
    assert!(words[0]
        .chars()
        .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c)));
    assert!(words[1].starts_with("host="), "{value}");
    assert_eq!(words[2], format!("pid={}", holding.child.id()));
    assert!(words[3].starts_with("started="), "{value}");
    assert_eq!(words[4], "program=sh", "the command's file name: {value}");
    let (code, _) = holding.finish();
    assert_eq!(code, Some(0));
}

#[test]
fn the_waiter_queue_and_wake_up_messages_never_carry_a_token() {
    let redis = Server::start();
    let dir = redis.dir.path().to_path_buf();
    let holding = Holding::start(&redis, "h", &[], "woken");
    let holder_token = holding.token();

    // Another client listens on the wake-up channel before anything is released.
    let mut conn = redis.conn();
    conn.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut pubsub = conn.as_pubsub();
    pubsub.subscribe("lockrun:wake:{woken}").unwrap();

    let waiter_token_file = dir.join("w.token");
    let script = format!(
        "echo \"$LOCKRUN_TOKEN\" > '{t}.tmp' && mv '{t}.tmp' '{t}'",
        t = waiter_token_file.display()
    );
    let mut waiter = Lockrun::on(&redis);
    waiter
        .args(["--wait", "60s", "woken", "--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut waiter = waiter.spawn().unwrap();
    let mut waiter_lines = wait_for_line(&mut waiter, "waiting");

    let value: String = redis.cmd(&["GET", "woken"]);
    let queued: Vec<String> = redis.cmd(&["ZRANGE", "lockrun:waiters:{woken}", "0", "-1"]);
    let tickets: Vec<String> = redis.cmd(&["ZRANGE", "lockrun:tickets:{woken}", "0", "-1"]);
    assert_eq!(queued.len(), 1, "the waiter is queued: {queued:?}");

    let (code, _) = holding.finish();
    assert_eq!(code, Some(0));
    let msg = pubsub.get_message().expect("a wake-up message");
    let woke: String = msg.get_payload().unwrap();
    assert_eq!(
        woke, queued[0],
        "the message names the queued waiter as the queue does"
    );
    drop(pubsub);

    assert_eq!(wait_timeout(&mut waiter, PATIENCE).unwrap().code(), Some(0));
    let waiter_log = waiter_lines.rest();
    let waiter_token = read_token(&waiter_token_file);
    let seen = [
        ("GET", vec![value]),
        ("the waiter queue", queued),
        ("the ticket set", tickets),
        ("the wake-up message", vec![woke]),
        ("the waiter's log", vec![waiter_log]),
    ];
    for (what, items) in &seen {
        for item in items {
            for (whose, token) in [("holder", &holder_token), ("waiter", &waiter_token)] {
                assert!(
                    !item.contains(token.as_str()),
                    "{what} shows the {whose}'s token: {item}"
                );
            }
        }
    }
}

#[test]
fn the_id_from_get_does_not_pass_the_reentrancy_check_but_the_token_does() {
    let redis = Server::start();
    let holding = Holding::start(&redis, "h", &[], "guarded");
    let token = holding.token();
    let value: String = redis.cmd(&["GET", "guarded"]);
    let id = first_word(&value);

    // What anyone who can read the key (or a log) has: not enough to run beside the holder.
    let mut forged = Lockrun::on(&redis);
    forged
        .env("LOCKRUN_KEY", "guarded")
        .env("LOCKRUN_TOKEN", &id)
        .args(["guarded", "echo", "ran"]);
    let out = run(forged);
    assert_eq!(out.status.code(), Some(75), "{}", stderr_of(&out));
    assert_eq!(stdout_of(&out), "", "ran beside the holder");
    assert!(
        !stderr_of(&out).contains("reentrant"),
        "{}",
        stderr_of(&out)
    );

    // The job's own secret still is (a nested lockrun of the same key).
    let mut nested = Lockrun::on(&redis);
    nested
        .env("LOCKRUN_KEY", "guarded")
        .env("LOCKRUN_TOKEN", &token)
        .args(["guarded", "echo", "ran"]);
    let out = run(nested);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert_eq!(stdout_of(&out).trim(), "ran");
    assert!(
        stderr_of(&out).contains("(reentrant)"),
        "{}",
        stderr_of(&out)
    );

    let (code, _) = holding.finish();
    assert_eq!(code, Some(0));
}

#[test]
fn a_semaphore_member_id_does_not_pass_the_reentrancy_check_but_the_token_does() {
    let redis = Server::start();
    let first = Holding::start(&redis, "s1", &["--limit", "2"], "pool");
    let second = Holding::start(&redis, "s2", &["--limit", "2"], "pool");
    let tokens = [first.token(), second.token()];
    let members: Vec<String> = redis.cmd(&["ZRANGE", "pool", "0", "-1"]);
    assert_eq!(members.len(), 2, "both slots taken: {members:?}");
    for m in &members {
        for t in &tokens {
            assert!(!m.contains(t.as_str()), "a member shows a token: {m}");
        }
        assert!(m.contains(" host=") && m.contains(" pid="), "{m}");
    }

    for member in &members {
        let mut forged = Lockrun::on(&redis);
        forged
            .env("LOCKRUN_KEY", "pool")
            .env("LOCKRUN_TOKEN", first_word(member))
            .args(["--limit", "2", "pool", "echo", "ran"]);
        let out = run(forged);
        assert_eq!(out.status.code(), Some(75), "{}", stderr_of(&out));
        assert_eq!(stdout_of(&out), "", "a third job ran in a semaphore of 2");
        let line = conflict_line(&out);
        for t in &tokens {
            assert!(!line.contains(t.as_str()), "the token leaked: {line}");
        }
        assert!(!line.contains(&first_word(member)), "{line}");
        assert!(line.contains("host=") && line.contains("pid="), "{line}");
    }

    let mut nested = Lockrun::on(&redis);
    nested
        .env("LOCKRUN_KEY", "pool")
        .env("LOCKRUN_TOKEN", &tokens[1])
        .args(["--limit", "2", "pool", "echo", "ran"]);
    let out = run(nested);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert_eq!(stdout_of(&out).trim(), "ran");
    assert!(
        stderr_of(&out).contains("(reentrant)"),
        "{}",
        stderr_of(&out)
    );

    for h in [first, second] {
        let (code, _) = h.finish();
        assert_eq!(code, Some(0));
    }
}

#[test]
fn a_lock_reserved_for_a_queued_waiter_does_not_name_it() {
    let redis = Server::start();
    // A waiter queued by another lockrun (written by hand here so the test knows its member),
    // its ticket good for a minute, and the lock itself free: the turn is the waiter's.
    let time: Vec<String> = redis.cmd(&["TIME"]);
    let now_ms: u64 = time[0].parse::<u64>().unwrap() * 1000;
    let member = "0123456789abcdef0123456789abcdef";
    redis.cmd::<()>(&[
        "ZADD",
        "lockrun:waiters:{turn}",
        &now_ms.to_string(),
        member,
    ]);
    redis.cmd::<()>(&[
        "ZADD",
        "lockrun:tickets:{turn}",
        &(now_ms + 60_000).to_string(),
        member,
    ]);
    let mut cmd = Lockrun::on(&redis);
    cmd.args(["turn", "echo", "ran"]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(75), "{}", stderr_of(&out));
    let line = conflict_line(&out);
    assert!(line.contains("reserved for"), "{line}");
    assert!(!line.contains(member), "the queued waiter is named: {line}");
}

#[test]
fn the_reentrancy_check_does_not_send_the_token_where_other_clients_can_see_it() {
    let redis = Server::start();
    let holding = Holding::start(&redis, "h", &[], "watched");
    let token = holding.token();

    // MONITOR shows every command with its arguments to any client allowed to run it (and
    // SLOWLOG keeps the slow ones): what the check sends must not include the secret.
    let mut conn = redis.conn();
    conn.set_read_timeout(Some(PATIENCE)).unwrap();
    conn.send_packed_command(&redis::cmd("MONITOR").get_packed_command())
        .unwrap();
    assert_eq!(conn.recv_response().unwrap(), redis::Value::Okay);
    let sentinel = "end-of-monitoring";
    let monitor = std::thread::spawn(move || {
        let mut seen = Vec::new();
        loop {
            let line = match conn.recv_response().expect("MONITOR line") {
                redis::Value::SimpleString(s) => s,
                other => format!("{other:?}"),
            };
            let done = line.contains(sentinel);
            seen.push(line);
            if done {
                return seen;
            }
        }
    });

    let mut nested = Lockrun::on(&redis);
    nested
        .env("LOCKRUN_KEY", "watched")
        .env("LOCKRUN_TOKEN", &token)
        .args(["watched", "echo", "ran"]);
    let out = run(nested);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert!(
        stderr_of(&out).contains("(reentrant)"),
        "{}",
        stderr_of(&out)
    );

    redis.cmd::<String>(&["ECHO", sentinel]);
    let seen = monitor.join().unwrap();
    assert!(
        seen.iter().any(|l| l.contains("reentrancy check")),
        "the check's EVAL was monitored: {seen:#?}"
    );
    for line in &seen {
        assert!(!line.contains(&token), "MONITOR shows the token: {line}");
    }
    let (code, _) = holding.finish();
    assert_eq!(code, Some(0));
}
