//! Servers (or proxies in front of them) that answer with what no Redis gives: lockrun ends in
//! one line with exit 69, gives back (token-checked, at once) whatever the server may have
//! granted it, and never loops for as long as a server's answers would have it.

use crate::support::fake::{Fake, Rewrite, Tamper, Words};
use crate::support::*;
use std::net::SocketAddr;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

fn upstream(redis: &Server) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], redis.port()))
}

/// A run or an operators' command that failed as a server that is no usable Redis makes it
/// fail: exit 69, one line on stderr mentioning every `needle`, nothing on stdout.
fn not_usable(out: &Output, needles: &[&str]) {
    let err = stderr_of(out);
    assert_eq!(out.status.code(), Some(69), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err:?}");
    for needle in needles {
        assert!(err.contains(needle), "{err:?} should mention {needle:?}");
    }
    assert_eq!(stdout_of(out), "", "{err}");
}

/// What a misbehaving server makes of the real reply.
type Odd = fn(&[u8]) -> Vec<u8>;

/// The replies no Redis gives lockrun's acquire: a reply of another shape in its place, and
/// the real one behind a RESP3 attribute (lockrun speaks RESP2, which has no attributes).
fn odd_replies() -> [(&'static str, Odd); 2] {
    [
        ("three", |_| b"*3\r\n+x\r\n+y\r\n+z\r\n".to_vec()),
        ("attribute", |real| {
            [&b"|1\r\n+a\r\n+b\r\n"[..], real].concat()
        }),
    ]
}

/// The server grants the lock (the proxy hands it the acquire, and the key is set with this
/// run's value and a 30 s TTL) and lockrun gets an odd reply: it gives the key back at once.
/// Left behind for its whole TTL, the key would make every host skip a tick nobody ran.
#[test]
fn an_odd_reply_to_a_granted_acquire_gives_the_key_back_at_once() {
    let redis = Server::start_tcp();
    for (name, odd) in odd_replies() {
        let tamper = Tamper::start(upstream(&redis), move |n, real| match n {
            0 => Rewrite::Send(odd(real)),
            _ => Rewrite::Pass,
        });
        let key = format!("odd-{name}");
        let mut cmd = Lockrun::bare().url(tamper.url());
        cmd.args(["-t", "30s", &key, "--", "echo", "ran"]);
        let started = Instant::now();
        let out = run(cmd);
        let took = started.elapsed();
        not_usable(&out, &["not a usable Redis"]);
        // The acquire did run: it handed out a fence.
        assert!(
            redis.exists(&format!("lockrun:fence:{{{key}}}")),
            "{name}: the server ran the acquire"
        );
        let pttl: i64 = redis.cmd(&["PTTL", &key]);
        assert_eq!(pttl, -2, "{name}: the key is gone, not left for its TTL");
        assert!(took < Duration::from_secs(5), "{name}: took {took:?}");
    }
}

/// The give-back is token-checked: an odd reply to an acquire that found the lock held by
/// someone else deletes nothing of theirs.
#[test]
fn the_give_back_after_an_odd_reply_never_deletes_another_holders_key() {
    let redis = Server::start_tcp();
    let theirs = "0123abcd host=elsewhere pid=7 started=2026-01-01T00:00:00Z program=job";
    for (name, odd) in odd_replies() {
        let key = format!("theirs-{name}");
        redis.cmd::<()>(&["SET", &key, theirs, "PX", "30000"]);
        let tamper = Tamper::start(upstream(&redis), move |_, real| Rewrite::Send(odd(real)));
        let mut cmd = Lockrun::bare().url(tamper.url());
        cmd.args([&key, "--", "echo", "ran"]);
        not_usable(&run(cmd), &["not a usable Redis"]);
        let value: String = redis.cmd(&["GET", &key]);
        assert_eq!(value, theirs, "{name}");
    }
}

/// A server that misbehaves on the give-back too (it never answers it) does not keep lockrun:
/// one attempt, bounded, then the exit.
#[test]
fn a_give_back_that_is_never_answered_costs_at_most_a_second() {
    let redis = Server::start_tcp();
    let tamper = Tamper::start(upstream(&redis), |n, _| match n {
        0 => Rewrite::Send(b"+OK\r\n".to_vec()),
        _ => Rewrite::Withhold,
    });
    let mut cmd = Lockrun::bare().url(tamper.url());
    cmd.args(["-t", "30s", "unanswered", "--", "echo", "ran"]);
    let started = Instant::now();
    let out = run(cmd);
    let took = started.elapsed();
    not_usable(&out, &["not a usable Redis"]);
    assert!(took < Duration::from_secs(3), "took {took:?}");
}

/// Several masters: the same promise on each. Two of three grant and answer oddly, so no
/// majority granted the lock, and each of them gives its key back, as the third does.
#[test]
fn odd_replies_from_a_majority_of_masters_leave_no_key_on_any() {
    let servers: Vec<Server> = (0..3).map(|_| Server::start_tcp()).collect();
    let proxies: Vec<Tamper> = servers
        .iter()
        .enumerate()
        .map(|(i, s)| {
            Tamper::start(upstream(s), move |n, _| match (i, n) {
                (0 | 1, 0) => Rewrite::Send(b"*3\r\n+x\r\n+y\r\n+z\r\n".to_vec()),
                _ => Rewrite::Pass,
            })
        })
        .collect();
    let urls: Vec<String> = proxies.iter().map(Tamper::url).collect();
    let mut cmd = Lockrun::to(&urls);
    cmd.args(["-t", "30s", "odd-redlock", "--", "echo", "ran"]);
    not_usable(&run(cmd), &["not a usable Redis", "no majority"]);
    for (i, s) in servers.iter().enumerate() {
        assert!(
            s.exists("lockrun:fence:{odd-redlock}"),
            "master {i} ran the acquire"
        );
        assert!(!s.exists("odd-redlock"), "master {i} has the key still");
    }
}

/// The reply lost with its connection (closed after the server ran the acquire): lockrun asks
/// again on a new connection, where the acquire finds its own value and the job runs. When
/// every reply is lost that way, the give-back goes on a new connection too, and nothing stays.
#[test]
fn an_acquire_whose_connection_closes_is_asked_again_or_given_back() {
    let redis = Server::start_tcp();
    for (every, code) in [(false, 0), (true, 69)] {
        let tamper = Tamper::start(upstream(&redis), move |n, _| match n {
            0 => Rewrite::Close,
            _ if every => Rewrite::Close,
            _ => Rewrite::Pass,
        });
        let key = format!("closed-{every}");
        let mut cmd = Lockrun::bare().url(tamper.url());
        cmd.args(["-t", "30s", &key, "--", "echo", "ran"]);
        let out = run(cmd);
        let err = stderr_of(&out);
        assert_eq!(out.status.code(), Some(code), "{err}");
        assert_eq!(stdout_of(&out), if every { "" } else { "ran\n" }, "{err}");
        assert!(redis.exists(&format!("lockrun:fence:{{{key}}}")), "{err}");
        assert!(!redis.exists(&key), "every={every}: the key is gone: {err}");
    }
}

/// A fake server whose `SCAN` answers each cursor with `next(cursor)` and no keys, and every
/// other command with +OK.
fn scanning(next: fn(u64) -> u64) -> Fake {
    Fake::answering(move |words: &Words| {
        if !words[0].eq_ignore_ascii_case(b"SCAN") {
            return b"+OK\r\n".to_vec();
        }
        let cursor: u64 = std::str::from_utf8(&words[1]).unwrap().parse().unwrap();
        let next = next(cursor).to_string();
        format!("*2\r\n${}\r\n{next}\r\n*0\r\n", next.len()).into_bytes()
    })
}

/// `lockrun list` against a server whose SCAN cursor never comes back to 0: a new cursor every
/// time, or cursors in a cycle. It ends with one line naming the cause, within the documented
/// bound of calls, rather than asking forever (hundreds of thousands of SCANs, no output).
#[test]
fn list_ends_against_a_scan_that_never_ends() {
    for (fake, says, most) in [
        (
            scanning(|c| c + 1),
            "did not end within 250000 calls",
            250_000,
        ),
        (
            scanning(|c| if c == 5 { 7 } else { 5 }),
            "came back to 5",
            3,
        ),
    ] {
        let mut cmd = Lockrun::bare();
        cmd.args(["list", "-r", &fake.url()])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let started = Instant::now();
        let mut child = cmd.spawn().unwrap();
        // A debug build on a loaded machine makes some 10,000 calls a second: more patience
        // than the usual run's.
        let status = wait_timeout(&mut child, 4 * PATIENCE);
        let took = started.elapsed();
        if status.is_none() {
            let _ = child.kill();
        }
        let out = child.wait_with_output().unwrap();
        assert!(status.is_some(), "{says}: still asking after {took:?}");
        not_usable(&out, &["SCAN", says]);
        assert!(
            fake.asked() <= most + 5,
            "{says}: {} requests",
            fake.asked()
        );
        eprintln!("{says}: {} requests in {took:?}", fake.asked());
    }
}

/// A fake server that answers every acquire "held, and the lease ends now, and you are next"
/// (`[0, 0, holder, 0]`), accepts subscriptions, and +OK to the rest.
fn ending_now() -> Fake {
    Fake::answering(|words: &Words| {
        let name = words[0].to_ascii_uppercase();
        match name.as_slice() {
            b"EVAL" | b"EVALSHA" => {
                let holder = "0123abcd host=elsewhere pid=7 started=2026-01-01T00:00:00Z";
                format!("*4\r\n:0\r\n:0\r\n${}\r\n{holder}\r\n:0\r\n", holder.len()).into_bytes()
            }
            b"SUBSCRIBE" => {
                let channel = &words[1];
                let mut reply = format!("*3\r\n$9\r\nsubscribe\r\n${}\r\n", channel.len());
                reply.push_str(&String::from_utf8_lossy(channel));
                reply.push_str("\r\n:1\r\n");
                reply.into_bytes()
            }
            _ => b"+OK\r\n".to_vec(),
        }
    })
}

/// A waiter told, on every look, that the holder's lease ends now never spins: the server's
/// answers pace its looks no faster than the documented floor.
#[test]
fn a_waiter_told_the_lease_ends_now_does_not_spin() {
    let fake = ending_now();
    let mut cmd = Lockrun::bare().url(fake.url());
    cmd.args(["--wait", "2s", "ending", "--", "echo", "ran"]);
    let out = run(cmd);
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(75), "{err}");
    eprintln!("{} requests in 2 s of waiting", fake.asked());
    assert!(
        fake.asked() < 100,
        "{} requests in 2 s: {err}",
        fake.asked()
    );
}

/// The grant's reply with its `item`th item (0-based: 1 the fence, 3 a tick's attempt) said as
/// `value`: a reply no script of lockrun's gives.
fn with_item(real: &[u8], item: usize, value: &str) -> Vec<u8> {
    let text = String::from_utf8_lossy(real);
    let mut lines: Vec<String> = text.split("\r\n").map(String::from).collect();
    assert!(
        lines[0].starts_with('*') && lines[1] == ":1",
        "not a grant: {text:?}"
    );
    lines[item + 1] = format!(":{value}");
    lines.join("\r\n").into_bytes()
}

/// A grant whose fence is negative (or 0, or a tick's attempt out of range) is refused as any
/// other malformed reply: read as unsigned it would wrap to near 2^64 and reach the job as
/// `LOCKRUN_FENCE`, after which a fenced resource would refuse every honest holder. The job
/// never runs and what the server granted is given back at once, in every mode.
#[test]
fn a_grant_with_a_negative_fence_is_refused_and_given_back() {
    let redis = Server::start_tcp();
    let cases: [(&str, &[&str], usize, &str, &str); 6] = [
        ("plain", &[], 1, "-5", "neg-plain"),
        ("zero", &[], 1, "0", "neg-zero"),
        ("shared", &["--shared"], 1, "-5", "neg-shared"),
        ("semaphore", &["--limit", "2"], 1, "-1", "neg-sem"),
        ("tick", &["--every", "1m", "--standby"], 1, "-5", "neg-tick"),
        (
            "attempt",
            &["--every", "1m", "--standby"],
            3,
            "-1",
            "neg-attempt",
        ),
    ];
    for (name, args, item, value, key) in cases {
        let value = value.to_string();
        let tamper = Tamper::start(upstream(&redis), move |n, real| match n {
            0 => Rewrite::Send(with_item(real, item, &value)),
            _ => Rewrite::Pass,
        });
        let mut cmd = Lockrun::bare().url(tamper.url());
        cmd.args(["-t", "30s"]).args(args).args([
            key,
            "--",
            "sh",
            "-c",
            "echo \"ran $LOCKRUN_FENCE\"",
        ]);
        let out = run(cmd);
        not_usable(&out, &["not a usable Redis"]);
        assert!(
            redis.exists(&format!("lockrun:fence:{{{key}}}")),
            "{name}: the server ran the acquire"
        );
        assert!(!redis.exists(key), "{name}: the key is given back");
        assert!(
            !redis.exists(&format!("lockrun:shared:{{{key}}}")),
            "{name}: the shared hold is given back"
        );
    }
}
