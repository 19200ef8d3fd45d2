//! `lockrun doctor [KEY]`: checks each server lockrun would lock on (the one server, the
//! Sentinels' primary, every Cluster primary, each Redlock master) for what makes locks safe or
//! not, one finding per line with a verdict: `ok`, `info`, `warn`, `fail`, `cannot check`.
//! Exit 0 when nothing is `warn` or `fail`, 1 when something is, 69 when no server answers.
//!
//! Every check but one only reads (the ACL checks use `ACL DRYRUN`, or `redis.acl_check_cmd`
//! inside a read-only script). The `lock` check writes, as a run does: it takes and releases a
//! probe lock through the run's own calls (`lockrun:doctor:{<random>}`, a name no user's lock
//! can have, with no history), by `EVALSHA` and by `EVAL`, then deletes the fencing counter the
//! lock leaves; it fails where a run would, in the run's words. A command the user may not run
//! makes the checks that needed it `cannot check`, never an error: locked-down servers are
//! normal, and lockrun's own ACL user may not run INFO or CONFIG at all. The verdicts are in
//! `checks`.

mod checks;

use super::print_json;
use crate::exit_codes::ExitCode;
use crate::lock::keys::{helper_key, wake_channel};
use crate::lock::probe::Probe;
use crate::lock::redis::RedisLock;
use crate::lock::LockError;
use checks::{finding, Access, ClockSample, Finding, Info, Server, Verdict};
use redis::Value;
use serde_json::json;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How many round trips the latency and clock checks measure.
const SAMPLES: usize = 20;

/// The checks of one server.
struct Report {
    server: String,
    findings: Vec<Finding>,
}

impl Report {
    fn ok(&self) -> bool {
        !self.findings.iter().any(|f| f.verdict.is_problem())
    }

    fn json(&self) -> serde_json::Value {
        json!({
            "server": self.server,
            "findings": self.findings.iter().map(|f| json!({
                "check": f.check,
                "verdict": f.verdict.as_str(),
                "detail": f.detail,
            })).collect::<Vec<_>>(),
            "ok": self.ok(),
        })
    }

    fn text(&self) -> String {
        let mut out = format!("server: {}\n", self.server);
        for f in &self.findings {
            out.push_str(&format!(
                "{:<13}{:<13}{}\n",
                f.verdict.as_str(),
                f.check,
                f.detail
            ));
        }
        out
    }
}

pub async fn run(
    nodes: &mut [RedisLock],
    key: Option<&str>,
    json: bool,
) -> Result<ExitCode, LockError> {
    let several = nodes.len() > 1;
    let mut top = Report {
        server: nodes
            .iter()
            .map(|n| n.shown().to_string())
            .collect::<Vec<_>>()
            .join(","),
        findings: Vec::new(),
    };
    if several {
        top.findings.push(finding(
            "redlock",
            Verdict::Info,
            format!(
                "{} independent masters: each lock needs a majority ({}); each is checked below",
                nodes.len(),
                super::quorum(nodes.len())
            ),
        ));
    }
    let mut reports = Vec::new();
    let mut unavailable = Vec::new();
    for node in nodes.iter_mut() {
        match examine(node, key).await {
            Ok((findings, mut per_node)) => {
                top.findings.extend(findings);
                reports.append(&mut per_node);
            }
            Err(e) => {
                // One Redlock master down is a finding; every server down is "unavailable".
                reports.push(Report {
                    server: node.shown().to_string(),
                    findings: vec![finding("connection", Verdict::Fail, e.to_string())],
                });
                unavailable.push(e);
            }
        }
    }
    if unavailable.len() == nodes.len() {
        return Err(unavailable.remove(0));
    }
    for e in &unavailable {
        tracing::warn!("{e}");
    }
    // One server: its report is the document. Several (Cluster primaries, Redlock masters):
    // the whole setup's findings, then each server's under `nodes`.
    let (doc, text, ok) = if reports.len() == 1 && top.findings.is_empty() {
        let only = &reports[0];
        (only.json(), only.text(), only.ok())
    } else {
        let ok = top.ok() && reports.iter().all(Report::ok);
        let mut doc = top.json();
        doc["ok"] = ok.into();
        doc["nodes"] = reports.iter().map(Report::json).collect();
        let mut text = top.text();
        for r in &reports {
            text.push('\n');
            text.push_str(&r.text());
        }
        (doc, text, ok)
    };
    if json {
        print_json(&doc);
    } else {
        crate::output::print(&text);
    }
    Ok(ExitCode::Command(if ok { 0 } else { 1 }))
}

/// One URL: the checks of its server, or on a Cluster the Cluster's own findings (returned
/// first) and one report per primary.
async fn examine(
    node: &mut RedisLock,
    key: Option<&str>,
) -> Result<(Vec<Finding>, Vec<Report>), LockError> {
    if !node.probes_cluster() {
        let mut findings = server_checks(node, None, None).await?;
        let cluster = findings.iter().position(|f| f.check == "cluster");
        if let (Some(key), Some(i)) = (key, cluster) {
            // Only when INFO said so: a Cluster node behind a plain URL fails above instead.
            if findings[i].verdict == Verdict::Info {
                let slot = finding(
                    "slot",
                    Verdict::Info,
                    format!("'{key}': not a Cluster, this server holds every key"),
                );
                findings.insert(i + 1, slot);
            }
        }
        return Ok((Vec::new(), vec![report(node.shown(), findings)]));
    }
    let shown = node.shown().to_string();
    let slots = match node
        .probe(redis::cmd("CLUSTER").arg("SLOTS").clone(), None)
        .await?
    {
        Probe::Answer(v) => slot_ranges(&v),
        Probe::Denied => {
            return Ok((
                vec![finding(
                    "cluster",
                    Verdict::CannotCheck,
                    "CLUSTER SLOTS is denied to this user: the primaries cannot be listed",
                )],
                Vec::new(),
            ))
        }
        Probe::Error(e) => {
            return Ok((
                vec![finding(
                    "cluster",
                    Verdict::CannotCheck,
                    format!("CLUSTER SLOTS: {e}"),
                )],
                Vec::new(),
            ))
        }
    };
    let mut primaries: Vec<(String, u16)> = Vec::new();
    let mut covered = 0u32;
    for (start, end, host, port) in &slots {
        covered += u32::from(end - start) + 1;
        if !primaries.contains(&(host.clone(), *port)) {
            primaries.push((host.clone(), *port));
        }
    }
    let mut top = vec![if covered == 16384 {
        finding(
            "cluster",
            Verdict::Ok,
            format!(
                "Cluster of {} primaries serving every slot; each is checked below",
                primaries.len()
            ),
        )
    } else {
        finding(
            "cluster",
            Verdict::Fail,
            format!(
                "the primaries serve {covered} of 16384 slots: locks in the others are refused"
            ),
        )
    }];
    if let Some(key) = key {
        let slot = match node
            .probe(redis::cmd("CLUSTER").arg("KEYSLOT").arg(key).clone(), None)
            .await?
        {
            Probe::Answer(Value::Int(s)) => Some(s),
            _ => None,
        };
        top.push(match slot {
            Some(slot) => {
                let owner = slots
                    .iter()
                    .find(|(start, end, _, _)| (i64::from(*start)..=i64::from(*end)).contains(&slot))
                    .map_or("no primary".to_string(), |(_, _, h, p)| format!("{h}:{p}"));
                finding(
                    "slot",
                    Verdict::Info,
                    format!("'{key}' is in slot {slot}, served by {owner} (its fence, queue and history too)"),
                )
            }
            None => finding("slot", Verdict::CannotCheck, "CLUSTER KEYSLOT gave no answer"),
        });
    }
    let mut reports = Vec::new();
    for (host, port) in &primaries {
        let server = format!("{host}:{port} (of {shown})");
        let serves: Vec<(u16, u16)> = slots
            .iter()
            .filter(|(_, _, h, p)| h == host && p == port)
            .map(|(start, end, _, _)| (*start, *end))
            .collect();
        match server_checks(node, Some((host, *port)), Some(&serves)).await {
            Ok(findings) => reports.push(report(&server, findings)),
            Err(e) => reports.push(report(
                &server,
                vec![finding("connection", Verdict::Fail, e.to_string())],
            )),
        }
    }
    Ok((top, reports))
}

fn report(server: &str, findings: Vec<Finding>) -> Report {
    Report {
        server: server.to_string(),
        findings,
    }
}

/// `[start, end, [host, port, …], replicas…]` per range → (start, end, primary host, port).
fn slot_ranges(v: &Value) -> Vec<(u16, u16, String, u16)> {
    let Value::Array(ranges) = v else {
        return Vec::new();
    };
    let int = |v: Option<&Value>| match v {
        Some(Value::Int(n)) => u16::try_from(*n).ok(),
        _ => None,
    };
    ranges
        .iter()
        .filter_map(|range| {
            let Value::Array(parts) = range else {
                return None;
            };
            let Some(Value::Array(primary)) = parts.get(2) else {
                return None;
            };
            Some((
                int(parts.first())?,
                int(parts.get(1))?,
                text(primary.first()?)?,
                int(primary.get(1))?,
            ))
        })
        .collect()
}

/// A reply as text (INFO is a bulk string in RESP2, a verbatim string in RESP3).
fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        Value::Okay => Some("OK".into()),
        _ => None,
    }
}

/// One command: its reply, or why the check that needs it cannot be made.
async fn ask(
    node: &mut RedisLock,
    at: Option<(&str, u16)>,
    args: &[&str],
) -> Result<Result<Value, String>, LockError> {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    let name = args[..args.len().min(2)].join(" ");
    Ok(match node.probe(cmd, at).await? {
        Probe::Answer(v) => Ok(v),
        Probe::Denied => Err(format!("{name} is denied to this user")),
        Probe::Error(e) => Err(format!("{name}: {e}")),
    })
}

/// Checks 1-5 and 7-10 (and 6 for a URL that is not a Cluster's) on one server (`at`: a
/// Cluster primary, serving `serves`).
async fn server_checks(
    node: &mut RedisLock,
    at: Option<(&str, u16)>,
    serves: Option<&[(u16, u16)]>,
) -> Result<Vec<Finding>, LockError> {
    let info = ask(node, at, &["INFO"])
        .await?
        .map(|v| Info::parse(&text(&v).unwrap_or_default()));
    let info = info.as_ref().map_err(String::as_str);
    let config =
        async |node: &mut RedisLock, name: &str| -> Result<Result<String, String>, LockError> {
            Ok(ask(node, at, &["CONFIG", "GET", name])
                .await?
                .and_then(|v| {
                    // [name, value] (RESP2) or {name: value} (RESP3).
                    let value = match &v {
                        Value::Array(items) => items.get(1).and_then(text),
                        Value::Map(pairs) => pairs.first().and_then(|(_, v)| text(v)),
                        _ => None,
                    };
                    value.ok_or_else(|| format!("CONFIG GET {name}: no such parameter"))
                }))
        };
    let save = config(node, "save").await?;
    let appendfsync = config(node, "appendfsync").await?;
    let (wait, waitaof) = wait_commands(node, at, info).await?;
    let (latency, clock) = round_trips(node, at).await?;
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
        findings.push(checks::cluster_mode(info));
    }
    findings.push(checks::latency(latency.as_deref().map_err(String::as_str)));
    findings.push(checks::clock(clock.as_deref().map_err(String::as_str)));
    findings.extend(acl(node, at).await?);
    let random = uuid::Uuid::new_v4().simple().to_string();
    findings.extend(match checks::probe_key(&random[..12], serves) {
        Some(key) => checks::lock(&node.probe_lock(&key).await),
        None => vec![finding(
            "lock",
            Verdict::CannotCheck,
            "no key of a slot this primary serves was found for the probe lock",
        )],
    });
    Ok(findings)
}

/// Whether the server offers WAIT and WAITAOF: `COMMAND INFO`, or else by version.
async fn wait_commands(
    node: &mut RedisLock,
    at: Option<(&str, u16)>,
    info: Result<&Info, &str>,
) -> Result<(Result<bool, String>, Result<bool, String>), LockError> {
    match ask(node, at, &["COMMAND", "INFO", "WAIT", "WAITAOF"]).await? {
        Ok(Value::Array(items)) if items.len() == 2 => {
            let offered = |v: &Value| !matches!(v, Value::Nil);
            Ok((Ok(offered(&items[0])), Ok(offered(&items[1]))))
        }
        other => {
            let why = other
                .err()
                .unwrap_or_else(|| "COMMAND INFO: unexpected reply".into());
            match info.ok().and_then(Server::of) {
                // WAIT is in every version lockrun supports.
                Some(server) => Ok((Ok(true), Ok(server.has_waitaof()))),
                None => Ok((Err(why.clone()), Err(why))),
            }
        }
    }
}

type Measured<T> = Result<Vec<T>, String>;

/// [`SAMPLES`] round trips of `TIME`, which serve both the latency and the clock check (and
/// which lockrun's own ACL user may run: its scripts call TIME); `PING` for the latency alone
/// when TIME is denied.
async fn round_trips(
    node: &mut RedisLock,
    at: Option<(&str, u16)>,
) -> Result<(Measured<Duration>, Measured<ClockSample>), LockError> {
    let mut rtts = Vec::new();
    let mut clock = Vec::new();
    let mut clock_why = None;
    for _ in 0..SAMPLES {
        let sent = SystemTime::now();
        let started = Instant::now();
        let reply = ask(node, at, &["TIME"]).await?;
        let rtt = started.elapsed();
        match reply {
            Ok(Value::Array(parts)) if parts.len() == 2 => {
                let num = |v: &Value| text(v).and_then(|t| t.parse::<i64>().ok());
                let (Some(secs), Some(us)) = (num(&parts[0]), num(&parts[1])) else {
                    clock_why = Some("TIME: unexpected reply".to_string());
                    break;
                };
                let sent_us = sent
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_micros() as i64);
                rtts.push(rtt);
                clock.push(ClockSample {
                    sent_us,
                    rtt,
                    server_us: secs * 1_000_000 + us,
                });
            }
            Ok(_) => {
                clock_why = Some("TIME: unexpected reply".to_string());
                break;
            }
            Err(why) => {
                clock_why = Some(why);
                break;
            }
        }
    }
    let Some(why) = clock_why else {
        return Ok((Ok(rtts), Ok(clock)));
    };
    // A denied command costs a reconnection: measure with PING instead.
    let mut rtts = Vec::new();
    for _ in 0..SAMPLES {
        let started = Instant::now();
        match ask(node, at, &["PING"]).await? {
            Ok(_) => rtts.push(started.elapsed()),
            Err(ping) => return Ok((Err(format!("{why}; {ping}")), Err(why))),
        }
    }
    Ok((Ok(rtts), Err(why)))
}

/// Checks whether the user may run every command lockrun sends or its scripts call, on a
/// sample key and a helper key beside it: by `ACL DRYRUN` (Redis 7.0+, needs ACL permission),
/// or else by `redis.acl_check_cmd` in a script, which needs nothing but EVAL, which lockrun's
/// own user has. Neither writes anything.
async fn acl(node: &mut RedisLock, at: Option<(&str, u16)>) -> Result<Vec<Finding>, LockError> {
    let probes = checks::probes(
        node.probes_cluster(),
        &helper_key(checks::PROBE_KEY, "fence"),
        &wake_channel(checks::PROBE_KEY),
    );
    // A user name: a bulk string (a fake server's +OK is none).
    let user = match ask(node, at, &["ACL", "WHOAMI"]).await? {
        Ok(Value::BulkString(b)) => Ok(String::from_utf8_lossy(&b).into_owned()),
        Ok(Value::SimpleString(s)) => Ok(s),
        Ok(_) => Err("ACL WHOAMI: unexpected reply".to_string()),
        Err(why) => Err(why),
    };
    let dryrun = match &user {
        Ok(user) => dry_run(node, at, user, &probes).await?,
        Err(why) => Err(why.clone()),
    };
    let name = user.map_or("this user".to_string(), |u| format!("user '{u}'"));
    let name = name.as_str();
    let why = match dryrun {
        Ok(answers) => return Ok(checks::acl(name, &answers, "ACL DRYRUN")),
        Err(why) => why,
    };
    match check_in_script(node, at, &probes).await? {
        Ok(answers) => Ok(checks::acl(name, &answers, "redis.acl_check_cmd")),
        Err(Some(_)) => Ok(vec![finding(
            "acl",
            Verdict::Fail,
            format!("{name} may not run EVAL: lockrun runs every lock operation as a script"),
        )]),
        Err(None) => Ok(vec![finding(
            "acl",
            Verdict::CannotCheck,
            format!("{why}, and this server has no redis.acl_check_cmd (Redis 7.0+)"),
        )]),
    }
}

/// `ACL DRYRUN <user> <command…>` for every probe; `Err`: DRYRUN itself cannot be asked.
async fn dry_run(
    node: &mut RedisLock,
    at: Option<(&str, u16)>,
    user: &str,
    probes: &[checks::Probe],
) -> Result<Result<Vec<(checks::Probe, Access)>, String>, LockError> {
    let mut answers = Vec::new();
    for probe in probes {
        let mut args = vec!["ACL", "DRYRUN", user];
        args.extend(probe.line.iter().map(String::as_str));
        let access = match ask(node, at, &args).await? {
            // "OK", or a sentence saying what is not permitted.
            Ok(Value::Okay) => Access::Allowed,
            Ok(v) if text(&v).as_deref() == Some("OK") => Access::Allowed,
            Ok(_) => Access::Denied,
            Err(e) if e.contains("not found") || e.contains("nknown command") => Access::Unknown,
            Err(e) => return Ok(Err(e)),
        };
        answers.push((probe.clone(), access));
    }
    Ok(Ok(answers))
}

/// Asks every probe in one script (`EVAL` is not among them: running the script shows it is
/// allowed, and its key permissions are the keyed commands'). Each probe is passed as its
/// length and its words; the answer is 1 allowed, 0 denied, -1 unknown command.
const ACL_CHECK: &str = r"
if not redis.acl_check_cmd then return -1 end
local out, i = {}, 1
while i <= #ARGV do
  local n = tonumber(ARGV[i])
  local ok, allowed = pcall(redis.acl_check_cmd, unpack(ARGV, i + 1, i + n))
  if not ok then out[#out + 1] = -1 elseif allowed then out[#out + 1] = 1 else out[#out + 1] = 0 end
  i = i + n + 1
end
return out
";

/// `Err(Some(why))`: EVAL is denied; `Err(None)`: the script cannot answer (no
/// `redis.acl_check_cmd`, or it failed).
async fn check_in_script(
    node: &mut RedisLock,
    at: Option<(&str, u16)>,
    probes: &[checks::Probe],
) -> Result<Result<Vec<(checks::Probe, Access)>, Option<String>>, LockError> {
    let asked: Vec<&checks::Probe> = probes.iter().filter(|p| p.line[0] != "EVAL").collect();
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(ACL_CHECK).arg(0);
    for p in &asked {
        cmd.arg(p.line.len()).arg(&p.line);
    }
    let reply = match node.probe(cmd, at).await? {
        Probe::Answer(Value::Array(items)) if items.len() == asked.len() => items,
        Probe::Denied => return Ok(Err(Some("EVAL is denied".into()))),
        _ => return Ok(Err(None)),
    };
    let mut answers: Vec<(checks::Probe, Access)> = probes
        .iter()
        .filter(|p| p.line[0] == "EVAL")
        .map(|p| (p.clone(), Access::Allowed))
        .collect();
    for (p, v) in asked.into_iter().zip(reply) {
        let access = match v {
            Value::Int(1) => Access::Allowed,
            Value::Int(0) => Access::Denied,
            _ => Access::Unknown,
        };
        answers.push((p.clone(), access));
    }
    Ok(Ok(answers))
}
