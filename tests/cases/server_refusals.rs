//! Redis refusing lockrun: every refusal of lockrun's configuration (authentication, ACL, a
//! server without what lockrun needs) exits 69 at once with what to fix, with or without
//! `--wait`; trouble of the server's own that passes (it cannot persist) is waited out.

use crate::support::fake::Fake;
use crate::support::server::Binary;
use crate::support::*;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// A failing run: exit 69 within `within`, one line of stderr mentioning every `needle`.
fn refused(cmd: Lockrun, within: Duration, needles: &[&str]) -> String {
    let started = Instant::now();
    let out = run(cmd);
    let took = started.elapsed();
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(69), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err:?}");
    for needle in needles {
        assert!(err.contains(needle), "{err:?} should mention {needle:?}");
    }
    // A configuration mistake is not waited out.
    assert!(took < within, "took {took:?}: {err}");
    // Every password in these tests has "-Pw" in it; a temporary directory's name (in a unix
    // socket's URL) is alphanumeric, so it cannot (though it can hold "Pw" by chance).
    assert!(!err.contains("-Pw"), "no password in: {err}");
    err
}

/// The ACL line docs/availability.md gives Redis 6.2+ and Valkey, word for word (split for ACL
/// SETUSER).
const ACL_LINE: &str =
    "ACL SETUSER lockrun on >lock-Pw-3 resetkeys ~* resetchannels &lockrun:wake:* \
    -@all +eval +evalsha +subscribe +select +del +exists +get +pexpire +pttl +publish +set +time +type \
    +zadd +zcard +zcount +zrange +zrangebyscore +zrank +zrem +zremrangebyscore +zscore \
    +xadd +xrevrange +scan";

/// The line it gives Redis 6.0, which has no channel ACLs: [`ACL_LINE`] without its channel
/// rules.
const ACL_LINE_6_0: &str =
    "ACL SETUSER lockrun on >lock-Pw-3 resetkeys ~* \
    -@all +eval +evalsha +subscribe +select +del +exists +get +pexpire +pttl +publish +set +time +type \
    +zadd +zcard +zcount +zrange +zrangebyscore +zrank +zrem +zremrangebyscore +zscore \
    +xadd +xrevrange +scan";

/// The channel rules of [`ACL_LINE`], which Redis 6.0 refuses.
const CHANNEL_RULES: [&str; 2] = ["resetchannels", "&lockrun:wake:*"];

/// `line` with single spaces and the doc's placeholder for the password.
fn as_documented(line: &str) -> String {
    line.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace("lock-Pw-3", "PASSWORD")
}

/// A user made by `line`, named `name`, without the word `without` ("": all).
fn acl_user_by(redis: &Server, line: &str, name: &str, without: &str) -> String {
    let words: Vec<&str> = line
        .split_whitespace()
        .map(|w| if w == "lockrun" { name } else { w })
        .filter(|w| *w != without)
        .collect();
    redis.cmd::<()>(&words);
    format!("redis://{name}:lock-Pw-3@127.0.0.1:{}", redis.port())
}

/// A user made by the documented [`ACL_LINE`], named `name`, without the word `without`.
fn acl_user(redis: &Server, name: &str, without: &str) -> String {
    acl_user_by(redis, ACL_LINE, name, without)
}

fn exists_in(redis: &Server, db: u8, key: &str) -> bool {
    let url = format!("unix://{}?db={db}", redis.socket.display());
    let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
    redis::cmd("EXISTS")
        .arg(key)
        .query::<i64>(&mut conn)
        .unwrap()
        == 1
}

fn lockrun_at(url: &str) -> Lockrun {
    Lockrun::bare().url(url)
}

#[test]
fn availability_md_shows_exactly_the_tested_acl_lines() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/availability.md"))
        .unwrap();
    let shown: Vec<&str> = doc
        .lines()
        .filter(|l| l.starts_with("ACL SETUSER"))
        .collect();
    let tested = [as_documented(ACL_LINE), as_documented(ACL_LINE_6_0)];
    assert_eq!(
        shown, tested,
        "docs/availability.md must show the line for Redis 6.2+ and Valkey, then the one for \
         Redis 6.0, as this test runs them"
    );
    // The two differ by the channel rules alone.
    let without: Vec<&str> = ACL_LINE
        .split_whitespace()
        .filter(|w| !CHANNEL_RULES.contains(w))
        .collect();
    assert_eq!(
        without.join(" "),
        as_documented(ACL_LINE_6_0).replace("PASSWORD", "lock-Pw-3")
    );
}

/// Runs lockrun as the user `line` makes on `redis` (a TCP server) down every path: plain,
/// `--min-hold`, renewals, `--limit`, reentrancy, waiting with and without `--limit`, leaving
/// the queue, in database 0 and 1, and the operators' commands; each must succeed without a
/// warning.
fn every_path_works_under(redis: &Server, line: &str) {
    let url = acl_user_by(redis, line, "lockrun", "");
    // A database other than 0 (SELECT) too.
    for url in [url.clone(), format!("{url}/1")] {
        let ok = |args: &[&str]| {
            let mut cmd = lockrun_at(&url);
            cmd.args(args);
            let out = run(cmd);
            let err = stderr_of(&out);
            assert_eq!(out.status.code(), Some(0), "{url} {args:?}: {err}");
            assert!(!err.contains("WARN"), "{url} {args:?}: {err}");
        };
        // Plain, with --min-hold, renewals, as a semaphore.
        ok(&["acl", "true"]);
        ok(&["--min-hold", "1s", "acl-min", "true"]);
        ok(&["-t", "1500ms", "acl-renew", "sleep", "0.7"]);
        ok(&["--limit", "2", "acl-sem", "true"]);
        // Nested: the reentrancy check.
        let bin = lockrun_bin().display().to_string();
        ok(&[
            "acl-re",
            "sh",
            "-c",
            &format!("'{bin}' -r '{url}' acl-re true"),
        ]);
        // Waiting, plain and --limit: queue, subscription, the holder's release wakes us.
        for limit in [&[][..], &["--limit", "1"]] {
            let mut holder = lockrun_at(&url);
            holder
                .args(limit)
                .args(["-t", "2s", "acl-wait", "sleep", "1"])
                .stderr(Stdio::piped());
            let holder = holder.spawn().unwrap();
            let db = if url.ends_with("/1") { 1 } else { 0 };
            eventually("the holder to lock", || exists_in(redis, db, "acl-wait"));
            let mut args = limit.to_vec();
            args.extend(["--wait", "10s", "acl-wait", "true"]);
            ok(&args);
            let out = wait_output(holder);
            assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
            assert!(!stderr_of(&out).contains("WARN"), "{}", stderr_of(&out));
        }
    }
    // A wait that ends gives its place in the queue back (LEAVE).
    redis.cmd::<()>(&["SET", "acl-held", "other", "PX", "5000"]);
    let mut cmd = lockrun_at(&url);
    cmd.args(["--wait", "500ms", "acl-held", "true"]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(75), "{}", stderr_of(&out));
    let queued: i64 = redis.cmd(&["ZCARD", "lockrun:waiters:{acl-held}"]);
    assert_eq!(queued, 0, "the waiter left the queue");
    // The run history is written (best effort: a refused XADD would go unnoticed otherwise),
    // and the operators' commands work with the same user.
    let runs: i64 = redis.cmd(&["XLEN", "lockrun:history:{acl}"]);
    assert_eq!(runs, 1, "the run of 'acl' in database 0 recorded");
    for verb in [&["status", "acl"][..], &["list"], &["history", "acl"]] {
        let mut cmd = Lockrun::bare();
        cmd.arg(verb[0]).arg("-r").arg(&url).args(&verb[1..]);
        let out = run(cmd);
        assert!(
            matches!(out.status.code(), Some(0 | 1)),
            "{verb:?}: {}",
            stderr_of(&out)
        );
        assert_eq!(stderr_of(&out), "", "{verb:?}");
    }
}

#[test]
fn the_documented_acl_line_is_enough_for_every_path() {
    every_path_works_under(&Server::start_tcp(), ACL_LINE);
}

#[test]
fn the_redis_6_0_acl_line_is_enough_for_every_path_on_redis_6_0() {
    let redis = Server::with(ServerOptions {
        binary: Binary::Redis6,
        ..ServerOptions::tcp()
    });
    let version: String = redis.cmd(&["INFO", "server"]);
    assert!(version.contains("redis_version:6.0."), "{version}");
    // The line of Redis 6.2+ is refused: 6.0 has no channel ACLs.
    let mut conn = redis.conn();
    let mut refused = redis::cmd("ACL");
    refused.arg(&ACL_LINE.split_whitespace().collect::<Vec<_>>()[1..]);
    let err = refused.query::<()>(&mut conn).unwrap_err().to_string();
    assert!(err.contains("'resetchannels': Syntax error"), "{err}");
    every_path_works_under(&redis, ACL_LINE_6_0);
}

#[test]
fn a_user_without_evalsha_still_locks_by_eval() {
    // ACL lines written for lockrun releases that sent no EVALSHA have +eval only: lockrun
    // then sends the scripts whole, quietly (one refused EVALSHA per run).
    let redis = Server::start_tcp();
    let url = acl_user(&redis, "nosha", "+evalsha");
    for _ in 0..2 {
        let mut cmd = lockrun_at(&url);
        cmd.args(["-t", "1500ms", "nosha", "sleep", "0.7"]);
        let out = run(cmd);
        let err = stderr_of(&out);
        assert_eq!(out.status.code(), Some(0), "{err}");
        assert!(!err.contains("WARN") && !err.contains("ERROR"), "{err}");
    }
    assert!(!redis.exists("nosha"));
}

#[test]
fn a_command_denied_inside_a_script_exits_69_naming_it() {
    // EVAL is allowed, SET (which the acquire script calls) is not: a refusal of the server's
    // (69, naming SET and the ACL), not a usage error (64, "Redis rejected the lock script").
    let redis = Server::start_tcp();
    let url = acl_user(&redis, "noset", "+set");
    for wait in [&[][..], &["--wait", "20s"]] {
        let mut cmd = lockrun_at(&url);
        cmd.args(wait).args(["noset", "true"]);
        refused(
            cmd,
            Duration::from_secs(5),
            &[
                "noset:***@",
                "refused lockrun",
                "may not run SET",
                "ACL permissions",
            ],
        );
    }
    assert!(!redis.exists("noset"));
}

#[test]
fn a_waiter_that_may_not_subscribe_exits_69_at_once() {
    // A refused SUBSCRIBE is a configuration mistake, reported at once: ignored, the waiter
    // would poll and exit 0 once the hand-set key expired (~4 s), the mistake never said.
    let redis = Server::start_tcp();
    let no_channel = acl_user(&redis, "nochan", "&lockrun:wake:*");
    let no_subscribe = acl_user(&redis, "nosub", "+subscribe");
    for (url, needle) in [
        (no_channel, "&lockrun:wake:*"),
        (
            no_subscribe,
            "no permissions to run the 'subscribe' command",
        ),
    ] {
        redis.cmd::<()>(&["SET", "subscribe", "other", "PX", "4000"]);
        let mut cmd = lockrun_at(&url);
        cmd.args(["--wait", "20s", "subscribe", "true"]);
        refused(cmd, Duration::from_secs(2), &[needle, "ACL permissions"]);
        redis.cmd::<i64>(&["DEL", "subscribe"]);
    }
}

#[test]
fn a_database_the_user_may_not_select_exits_69_at_once() {
    // redis-rs wraps the refused SELECT; it must not read as "unavailable", which --wait
    // would retry until the wait ended.
    let redis = Server::start_tcp();
    let url = acl_user(&redis, "noselect", "+select");
    let mut cmd = lockrun_at(&format!("{url}/3"));
    cmd.args(["--wait", "20s", "select", "true"]);
    refused(
        cmd,
        Duration::from_secs(2),
        &[
            "no permissions to run the 'select' command",
            "ACL permissions",
        ],
    );
}

/// A server on a unix socket with extra `args`, ready; and its socket.
fn server(args: &[&str]) -> (Server, PathBuf) {
    let server = Server::start_with_args(args);
    let sock = server.socket.clone();
    (server, sock)
}

#[test]
fn a_server_without_eval_is_refused_not_misused() {
    // Unavailable (69), saying what is missing; never a usage error (64) quoting the start
    // of lockrun's script.
    let (_server, sock) = server(&["--save", "", "--rename-command", "EVAL", ""]);
    let url = format!("unix://{}", sock.display());
    for wait in [&[][..], &["--wait", "20s"]] {
        let mut cmd = lockrun_at(&url);
        cmd.args(wait).args(["noeval", "true"]);
        let err = refused(cmd, Duration::from_secs(5), &["does not offer EVAL"]);
        assert!(!err.contains("prelude"), "{err}");
    }
}

#[test]
fn a_server_that_cannot_persist_is_waited_out() {
    // MISCONF: a failed RDB save with stop-writes-on-bgsave-error stops all writes. The disk is
    // the problem, not the key: "unavailable" (69), and retried while waiting, not refused
    // at once (64, "Redis rejected the lock script") even with --wait.
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let (_server, sock) = server(&["--save", "3600 1", "--dir", data.to_str().unwrap()]);
    // The save cannot write into a directory that is gone.
    std::fs::remove_dir_all(&data).unwrap();
    let client = redis::Client::open(format!("unix://{}", sock.display())).unwrap();
    let mut conn = client.get_connection().unwrap();
    let _: redis::RedisResult<String> = redis::cmd("BGSAVE").query(&mut conn);
    eventually("writes to be refused (MISCONF)", || {
        let r: redis::RedisResult<()> = redis::cmd("SET").arg("probe").arg("1").query(&mut conn);
        r.is_err_and(|e| e.code() == Some("MISCONF"))
    });
    let url = format!("unix://{}", sock.display());
    let mut cmd = lockrun_at(&url);
    cmd.args(["misconf", "true"]);
    refused(cmd, Duration::from_secs(5), &["unavailable", "MISCONF"]);
    // A waiter keeps trying and runs once an operator has fixed it (here: no more saves).
    let mut cmd = lockrun_at(&url);
    cmd.args(["--wait", "20s", "misconf", "echo", "ran"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let waiter = cmd.spawn().unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("save")
        .arg("")
        .query(&mut conn)
        .unwrap();
    let out = wait_output(waiter);
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(stdout_of(&out), "ran\n");
    assert!(
        err.contains("Redis unavailable while waiting for the lock; retrying"),
        "{err}"
    );
}

/// Servers lockrun cannot lock on: without EVAL and EVALSHA, a Sentinel's port given as
/// redis://, a server that answers every command with an error, or with +OK, :1 or nil.
/// Each is "unavailable" (69) in one line naming the problem, never a usage error dumping the
/// script's SHA and arguments.
#[test]
fn a_server_that_cannot_run_lockrun_is_unavailable_in_one_line() {
    let (_server, sock) = server(&[
        "--save",
        "",
        "--rename-command",
        "EVAL",
        "",
        "--rename-command",
        "EVALSHA",
        "",
    ]);
    let no_scripts = format!("unix://{}", sock.display());
    let set = ReplicaSet::start(0);
    let sentinels = Sentinels::start(&set, 1);
    let sentinel = format!("redis://127.0.0.1:{}", sentinels.nodes[0].port());
    let errors = Fake::start(b"-ERR this server says no\r\n");
    let ok = Fake::start(b"+OK\r\n");
    let one = Fake::start(b":1\r\n");
    let nil = Fake::start(b"$-1\r\n");
    let sha = |s: &str| {
        s.split(|c: char| !c.is_ascii_hexdigit())
            .any(|w| w.len() == 40)
    };
    for (url, says) in [
        (no_scripts.as_str(), "does not offer EVAL"),
        (sentinel.as_str(), "Sentinel"),
        (&errors.url(), "not a usable Redis"),
        (&ok.url(), "not a usable Redis"),
        (&one.url(), "not a usable Redis"),
        (&nil.url(), "not a usable Redis"),
    ] {
        let mut cmd = lockrun_at(url);
        cmd.args(["-t", "3s", "k", "--", "echo", "ran"]);
        let err = refused(cmd, Duration::from_secs(10), &[says]);
        assert!(!sha(&err), "{url}: no script hash: {err}");
        assert!(
            !err.contains("prelude") && !err.contains("ARGV"),
            "{url}: {err}"
        );
    }
    drop(sentinels);
}

/// A database the server does not have (`/16` on a 16-database server) is a configuration
/// error: refused at once, like a wrong password, not retried for the whole --wait (30
/// minutes of silence in CI with --wait 30m).
#[test]
fn a_database_the_server_does_not_have_is_refused_at_once() {
    let (_server, sock) = server(&["--save", "", "--databases", "16"]);
    for url in [
        format!("unix://{}?db=16", sock.display()),
        format!("redis+unix://{}?db=99", sock.display()),
    ] {
        for wait in [&[][..], &["--wait", "30s"]] {
            let mut cmd = lockrun_at(&url);
            cmd.args(wait).args(["k", "--", "echo", "ran"]);
            refused(cmd, Duration::from_secs(5), &["no database", "databases"]);
        }
    }
}

/// Errors in values from the environment name the variable; a flag wins over a variable.
#[test]
fn environment_mistakes_name_the_variable_and_a_flag_wins() {
    use std::os::unix::ffi::OsStrExt;
    let redis = Server::start();
    let bad = std::ffi::OsStr::from_bytes(b"3\xffs");
    for var in ["LOCKRUN_TTL", "LOCKRUN_REDIS_URL", "LOCKRUN_EVERY"] {
        let mut cmd = Lockrun::bare();
        cmd.env(var, bad).args(["k", "--", "echo", "ran"]);
        let out = run(cmd);
        let err = stderr_of(&out);
        assert_eq!(out.status.code(), Some(64), "{var}: {err}");
        assert!(err.contains(var) && err.contains("UTF-8"), "{var}: {err}");
    }
    for (var, value, says) in [
        ("LOCKRUN_NODE_TIMEOUT", "20s", "LOCKRUN_NODE_TIMEOUT"),
        ("LOCKRUN_TLS_INSECURE", "1", "LOCKRUN_TLS_INSECURE"),
    ] {
        let mut cmd = Lockrun::on(&redis);
        cmd.env(var, value).args(["k", "--", "echo", "ran"]);
        let out = run(cmd);
        let err = stderr_of(&out);
        assert_eq!(out.status.code(), Some(64), "{var}: {err}");
        assert!(err.contains(says), "{var}: {err}");
    }
    // LOCKRUN_QUIET=1 with -v: the flag wins (debug lines are printed); -q -v together conflict.
    let mut cmd = Lockrun::on(&redis);
    cmd.env("LOCKRUN_QUIET", "1")
        .args(["-v", "k", "--", "true"]);
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert!(stderr_of(&out).contains("DEBUG"), "{}", stderr_of(&out));
    let mut cmd = Lockrun::on(&redis);
    cmd.args(["-q", "-v", "k", "--", "true"]);
    assert_eq!(run(cmd).status.code(), Some(64));
    // `list ''` matched nothing, silently.
    let mut cmd = Lockrun::bare();
    cmd.args(["list", "", "-r"]).arg(redis.url());
    let out = run(cmd);
    assert_eq!(out.status.code(), Some(64), "{}", stderr_of(&out));
    assert!(
        stderr_of(&out).contains("empty pattern"),
        "{}",
        stderr_of(&out)
    );
}
