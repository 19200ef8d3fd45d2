//! Every check of one server: the questions asked of it (one pipeline for the server's
//! facts, the round trips of the latency and clock checks, the clock's second reading a
//! window later) and the verdicts they feed, in the order they are printed. Separate from
//! `doctor.rs`, which decides which servers a URL names and prints their reports.

use super::acl::acl;
use super::ask::{answer, ask, command, text};
use super::checks::{self, finding, ClockSample, Finding, Info, Server, Verdict};
use super::{Out, Section};
use crate::clock_rate::Rate;
use crate::duration::Human;
use crate::lock::redis::RedisLock;
use crate::lock::LockError;
use redis::Value;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How many round trips the latency and clock checks measure, at most: they stop at the
/// request timeout.
const SAMPLES: usize = 20;

/// Every check of one server (`at`: a Cluster primary, serving `serves`), each finding added
/// to `section` as soon as it is known; `slot` goes after the cluster finding. `Err`: the
/// server did not answer the first request. A request that fails later makes its check
/// `cannot check` (the lock probe: `fail`, as a run would), and the others still go on.
pub(super) async fn server_checks(
    node: &mut RedisLock,
    at: Option<(&str, u16)>,
    serves: Option<&[(u16, u16)]>,
    out: &mut Out,
    section: Section,
    slot: Option<Finding>,
) -> Result<(), LockError> {
    // What checks 1 to 6 and the ACL's user need, in one round trip.
    let asked: [&[&str]; 5] = [
        &["INFO"],
        &["CONFIG", "GET", "save"],
        &["CONFIG", "GET", "appendfsync"],
        &["COMMAND", "INFO", "WAIT", "WAITAOF"],
        &["ACL", "WHOAMI"],
    ];
    let cmds: Vec<redis::Cmd> = asked.iter().map(|a| command(a)).collect();
    let replies = node.probe_all(&cmds, at).await?;
    out.answered();
    let mut replies = replies
        .into_iter()
        .zip(asked)
        .map(|(p, a)| answer(p, &a[..a.len().min(2)].join(" ")));
    let mut next = || replies.next().unwrap_or_else(|| Err("no reply".into()));
    let info = next().map(|v| Info::parse(&text(&v).unwrap_or_default()));
    let info = info.as_ref().map_err(String::as_str);
    let config = |reply: Result<Value, String>, name: &str| {
        reply.and_then(|v| {
            // [name, value] (RESP2) or {name: value} (RESP3).
            let value = match &v {
                Value::Array(items) => items.get(1).and_then(text),
                Value::Map(pairs) => pairs.first().and_then(|(_, v)| text(v)),
                _ => None,
            };
            value.ok_or_else(|| format!("CONFIG GET {name}: no such parameter"))
        })
    };
    let save = config(next(), "save");
    let appendfsync = config(next(), "appendfsync");
    let (wait, waitaof) = wait_commands(next(), info);
    // A user name: a bulk string (a fake server's +OK is none).
    let user = match next() {
        Ok(Value::BulkString(b)) => Ok(String::from_utf8_lossy(&b).into_owned()),
        Ok(Value::SimpleString(s)) => Ok(s),
        Ok(_) => Err("ACL WHOAMI: unexpected reply".to_string()),
        Err(why) => Err(why),
    };
    let mut findings = vec![
        checks::server(info),
        checks::role(info),
        checks::persistence(
            info,
            save.as_deref().map_err(String::as_str),
            appendfsync.as_deref().map_err(String::as_str),
        ),
        checks::eviction(info),
        checks::acks(wait.as_ref().copied().map_err(String::as_str), info),
        checks::fsync(waitaof.as_ref().copied().map_err(String::as_str), info),
    ];
    if !node.probes_cluster() {
        let cluster = checks::cluster_mode(info);
        // Only when INFO said so: a Cluster node behind a plain URL fails instead.
        let plain = cluster.verdict == Verdict::Info;
        findings.push(cluster);
        findings.extend(slot.filter(|_| plain));
    }
    out.add_all(section, findings);
    let (latency, clock) = match round_trips(node, at).await {
        Ok(measured) => measured,
        Err(e) => (Err(e.to_string()), Err(e.to_string())),
    };
    let first = clock.as_deref().ok().and_then(checks::fastest).copied();
    out.add(
        section,
        checks::latency(latency.as_deref().map_err(String::as_str)),
        None,
    );
    out.add(
        section,
        checks::clock(clock.as_deref().map_err(String::as_str)),
        None,
    );
    let acl = match acl(node, at, user).await {
        Ok(findings) => findings,
        Err(e) => vec![finding("acl", Verdict::CannotCheck, e.to_string())],
    };
    out.add_all(section, acl);
    let random = uuid::Uuid::new_v4().simple().to_string();
    let lock = match checks::probe_key(&random[..12], serves) {
        Some(key) => checks::lock(&node.probe_lock(&key).await),
        None => vec![finding(
            "lock",
            Verdict::CannotCheck,
            "no key of a slot this primary serves was found for the probe lock",
        )],
    };
    out.add_all(section, lock);
    let rate = match first {
        Some(first) => clock_rate(node, at, &first).await,
        None => Err(clock.err().unwrap_or_else(|| "no TIME answer".into())),
    };
    out.add(
        section,
        checks::clock_rate(rate.as_ref().copied().map_err(String::as_str)),
        None,
    );
    Ok(())
}

/// Our clock's rate against the server's: `first`, the fastest of the clock check's readings,
/// and the fastest of a few more once the window has passed since it ([`checks::rate_window`];
/// the checks in between count towards it).
async fn clock_rate(
    node: &mut RedisLock,
    at: Option<(&str, u16)>,
    first: &ClockSample,
) -> Result<Rate, String> {
    let Some(window) = checks::rate_window(first.rtt) else {
        return Err(format!(
            "the fastest TIME round trip took {}: too slow to measure the rate to 1 % within {:?}",
            Human(first.rtt),
            checks::RATE_WINDOW_MAX
        ));
    };
    tokio::time::sleep_until(first.sent + window).await;
    let mut later: Option<ClockSample> = None;
    for _ in 0..3 {
        let sent = tokio::time::Instant::now();
        let reply = ask(node, at, &["TIME"])
            .await
            .map_err(|e| e.to_string())??;
        let rtt = sent.elapsed();
        let Some(server_us) = time_us(&reply) else {
            return Err("TIME: unexpected reply".into());
        };
        if later.is_none_or(|l| rtt < l.rtt) {
            later = Some(ClockSample {
                sent_us: 0,
                sent,
                rtt,
                server_us,
            });
        }
    }
    let (Some(a), Some(b)) = (first.reading(), later.and_then(|l| l.reading())) else {
        return Err("TIME: unexpected reply".into());
    };
    Rate::between(&a, &b)
        .ok_or_else(|| "the server's clock went back between two TIME replies".into())
}

/// A `TIME` reply ([seconds, microseconds]) in microseconds.
fn time_us(reply: &Value) -> Option<i64> {
    let Value::Array(parts) = reply else {
        return None;
    };
    let num = |v: &Value| text(v).and_then(|t| t.parse::<i64>().ok());
    match parts.as_slice() {
        [secs, us] => Some(num(secs)? * 1_000_000 + num(us)?),
        _ => None,
    }
}

/// Whether the server offers WAIT and WAITAOF: `COMMAND INFO`'s reply, or else by version.
type Offered = Result<bool, String>;

fn wait_commands(reply: Result<Value, String>, info: Result<&Info, &str>) -> (Offered, Offered) {
    match reply {
        Ok(Value::Array(items)) if items.len() == 2 => {
            let offered = |v: &Value| !matches!(v, Value::Nil);
            (Ok(offered(&items[0])), Ok(offered(&items[1])))
        }
        other => {
            let why = other
                .err()
                .unwrap_or_else(|| "COMMAND INFO: unexpected reply".into());
            match info.ok().and_then(Server::of) {
                // WAIT is in every version lockrun supports.
                Some(server) => (Ok(true), Ok(server.has_waitaof())),
                None => (Err(why.clone()), Err(why)),
            }
        }
    }
}

type Measured<T> = Result<Vec<T>, String>;

/// Up to [`SAMPLES`] round trips of `TIME`, which serve both the latency and the clock check
/// (and which lockrun's own ACL user may run: its scripts call TIME); `PING` for the latency
/// alone when TIME is denied. Sampling stops before a round trip that would take the check
/// past the request timeout: a slow server gets one sample, not twenty slow ones.
async fn round_trips(
    node: &mut RedisLock,
    at: Option<(&str, u16)>,
) -> Result<(Measured<Duration>, Measured<ClockSample>), LockError> {
    let budget = node.request_timeout();
    let began = Instant::now();
    let more = |rtts: &[Duration]| {
        let last = rtts.last().copied().unwrap_or_default();
        rtts.len() < SAMPLES && began.elapsed() + last <= budget
    };
    let mut rtts = Vec::new();
    let mut clock = Vec::new();
    let mut clock_why = None;
    while more(&rtts) {
        let sent = SystemTime::now();
        let started = tokio::time::Instant::now();
        let reply = ask(node, at, &["TIME"]).await?;
        let rtt = started.elapsed();
        match reply.as_ref().map(time_us) {
            Ok(Some(server_us)) => {
                let sent_us = sent
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_micros() as i64);
                rtts.push(rtt);
                clock.push(ClockSample {
                    sent_us,
                    sent: started,
                    rtt,
                    server_us,
                });
            }
            Ok(None) => {
                clock_why = Some("TIME: unexpected reply".to_string());
                break;
            }
            Err(_) => {
                clock_why = reply.err();
                break;
            }
        }
    }
    let Some(why) = clock_why else {
        return Ok((Ok(rtts), Ok(clock)));
    };
    // A denied command costs a reconnection: measure with PING instead.
    let mut rtts = Vec::new();
    while more(&rtts) {
        let started = Instant::now();
        match ask(node, at, &["PING"]).await? {
            Ok(_) => rtts.push(started.elapsed()),
            Err(ping) => return Ok((Err(format!("{why}; {ping}")), Err(why))),
        }
    }
    Ok((Ok(rtts), Err(why)))
}
