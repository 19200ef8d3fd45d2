//! Keys lockrun did not write are the user's: a run refuses them (64) and `release --force`
//! leaves them alone, whatever their type, and nothing about them changes.

use crate::support::*;

fn leaderboard(redis: &Server) -> Vec<String> {
    redis.cmd(&["ZRANGE", "leaderboard", "0", "-1", "WITHSCORES"])
}

/// A user's sorted set is refused (64), with or without `--limit`, never taken for a semaphore:
/// a semaphore prunes its "expired" members, so the job would run and the user's set be gone.
#[test]
fn a_users_sorted_set_is_refused_not_pruned() {
    let redis = Server::start();
    redis.cmd::<()>(&["ZADD", "leaderboard", "100", "alice", "200", "bob"]);
    let before = leaderboard(&redis);
    for args in [
        &["--limit", "5"][..],
        &[][..],
        &["--limit", "5", "--wait", "1s"][..],
    ] {
        let mut cmd = Lockrun::on(&redis);
        cmd.args(args).args(["leaderboard", "--", "echo", "RAN"]);
        let out = run(cmd);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {}", stderr_of(&out));
        assert_eq!(stdout_of(&out), "", "{args:?}: the job did not run");
        assert!(
            stderr_of(&out)
                .contains("'leaderboard' is a Redis sorted set that is not a lockrun semaphore"),
            "{args:?}: {}",
            stderr_of(&out)
        );
        assert_eq!(leaderboard(&redis), before, "{args:?}: untouched");
    }
    // A real semaphore of the same shape of use still works.
    let mut cmd = Lockrun::on(&redis);
    cmd.args(["--limit", "2", "sem", "--", "echo", "RAN"]);
    assert_eq!(stdout_of(&run(cmd)), "RAN\n");
}

/// `release --force` deletes only lockrun's locks and semaphores: a string or sorted set of
/// the name that lockrun did not write is refused (64) and stays as it was.
#[test]
fn release_force_leaves_keys_lockrun_did_not_write() {
    let redis = Server::start();
    redis.cmd::<()>(&["SET", "config:db", r#"{"host":"db1"}"#]);
    redis.cmd::<()>(&["ZADD", "leaderboard", "100", "alice"]);
    // Looks like a holder at first sight, but not as lockrun writes one.
    redis.cmd::<()>(&["SET", "almost", "host=web1 pid=42"]);
    for key in ["config:db", "leaderboard", "almost"] {
        let mut cmd = Lockrun::on(&redis);
        cmd.args(["release", "--force", key]);
        let out = run(cmd);
        assert_eq!(out.status.code(), Some(64), "{key}: {}", stderr_of(&out));
        let err = stderr_of(&out);
        assert!(
            err.contains("deletes only lockrun's locks and semaphores"),
            "{key}: {err}"
        );
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        assert!(redis.exists(key), "{key} is still there");
    }
    let value: String = redis.cmd(&["GET", "config:db"]);
    assert_eq!(value, r#"{"host":"db1"}"#);
    assert_eq!(leaderboard(&redis), ["alice", "100"]);

    // lockrun's own lock is still deleted by --force.
    let mut holder = Lockrun::on(&redis);
    holder.args(["--min-hold", "30s", "stuck", "--", "true"]);
    assert_eq!(run(holder).status.code(), Some(0));
    let mut cmd = Lockrun::on(&redis);
    cmd.args(["release", "--force", "stuck"]);
    assert_eq!(run(cmd).status.code(), Some(0));
    assert!(!redis.exists("stuck"));
}
