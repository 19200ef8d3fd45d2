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
//! normal, and lockrun's own ACL user may not run INFO or CONFIG at all.
//!
//! Each request is bounded by the request timeout (`--node-timeout`), and each check costs one
//! round trip or a few (the questions of several checks go in one pipeline; the latency samples
//! stop at the request timeout), so a server that answers slowly still gets every finding in a
//! bounded time, each printed as soon as it is known (`--json`: one document at the end). The
//! clock's rate needs time rather than round trips: its second reading of the server's clock
//! comes 1 s after the first (up to 3 s for slower round trips; none when even that would not
//! tell 1 %), so doctor takes about a second per server. The verdicts are in `checks`.

mod checks;

use super::print_json;
use crate::clock_rate::Rate;
use crate::duration::Human;
use crate::exit_codes::ExitCode;
use crate::lock::keys::{helper_key, wake_channel};
use crate::lock::probe::ProbeReply;
use crate::lock::redis::RedisLock;
use crate::lock::LockError;
use checks::{finding, AclVerdict, ClockSample, Finding, Info, Server, Verdict};
use redis::Value;
use serde_json::json;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How many round trips the latency and clock checks measure, at most: they stop at the
/// request timeout.
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
}

/// One finding as a line of text.
fn line(f: &Finding) -> String {
    format!("{:<13}{:<13}{}\n", f.verdict.as_str(), f.check, f.detail)
}

/// Which report a finding goes to.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Section(usize);

/// The reports as they grow, and the text printed as they do: each finding is printed when it
/// is known, so a slow server shows its checks one by one. Nothing is printed until some
/// server has answered (when none does, doctor prints nothing and exits 69).
struct Out {
    json: bool,
    reports: Vec<Report>,
    /// Text not printed yet: `Some` until a server answers.
    held: Option<String>,
    /// The section whose header was printed last.
    current: Option<Section>,
}

impl Out {
    fn new(json: bool) -> Out {
        Out {
            json,
            reports: Vec::new(),
            held: Some(String::new()),
            current: None,
        }
    }

    fn print(&mut self, text: &str) {
        if self.json {
            return;
        }
        match &mut self.held {
            Some(held) => held.push_str(text),
            None => crate::output::print(text),
        }
    }

    /// A server answered: what was held is printed, and from now on each line as it comes.
    fn answered(&mut self) {
        if let Some(held) = self.held.take() {
            self.print(&held);
        }
    }

    /// A new report; its header is printed with its first finding.
    fn section(&mut self, server: &str) -> Section {
        self.reports.push(Report {
            server: server.to_string(),
            findings: Vec::new(),
        });
        Section(self.reports.len() - 1)
    }

    /// Adds a finding to `to` and prints it, under a header naming `to`'s server, or
    /// `heading`: a Cluster's own findings go to the whole setup's report, and in a list of
    /// Redlock masters another master's findings may have been printed since its header.
    fn add(&mut self, to: Section, f: Finding, heading: Option<&str>) {
        if self.current != Some(to) {
            let gap = if self.current.is_some() { "\n" } else { "" };
            let name = heading.unwrap_or(&self.reports[to.0].server).to_string();
            self.print(&format!("{gap}server: {name}\n"));
            self.current = Some(to);
        }
        self.print(&line(&f));
        self.reports[to.0].findings.push(f);
    }

    fn add_all(&mut self, to: Section, findings: Vec<Finding>) {
        for f in findings {
            self.add(to, f, None);
        }
    }
}

pub async fn run(
    nodes: &mut [RedisLock],
    key: Option<&str>,
    json: bool,
) -> Result<ExitCode, LockError> {
    let several = nodes.len() > 1;
    let mut out = Out::new(json);
    // One plain server: its report is the document. Several (Cluster primaries, Redlock
    // masters): the whole setup's findings, then each server's under `nodes`.
    let top = (several || nodes[0].probes_cluster()).then(|| {
        let all: Vec<&str> = nodes.iter().map(RedisLock::shown).collect();
        out.section(&all.join(","))
    });
    if let (true, Some(top)) = (several, top) {
        let f = finding(
            "redlock",
            Verdict::Info,
            format!(
                "{} independent masters: each lock needs a majority ({}); each is checked below",
                nodes.len(),
                crate::lock::quorum(nodes.len())
            ),
        );
        out.add(top, f, None);
    }
    let mut unavailable = Vec::new();
    for node in nodes.iter_mut() {
        let section = (!node.probes_cluster()).then(|| out.section(node.shown()));
        if let Err(e) = examine(node, key, &mut out, top, section).await {
            // One Redlock master down is a finding; every server down is "unavailable".
            let s = section.unwrap_or_else(|| out.section(node.shown()));
            out.add(s, finding("connection", Verdict::Fail, e.to_string()), None);
            unavailable.push(e);
        }
    }
    if unavailable.len() == nodes.len() {
        return Err(unavailable.remove(0));
    }
    out.answered();
    for e in &unavailable {
        tracing::warn!("{e}");
    }
    let ok = out.reports.iter().all(Report::ok);
    if json {
        let doc = match top {
            None => out.reports[0].json(),
            Some(top) => {
                let mut doc = out.reports[top.0].json();
                doc["ok"] = ok.into();
                doc["nodes"] = out
                    .reports
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| *i != top.0)
                    .map(|(_, r)| r.json())
                    .collect();
                doc
            }
        };
        print_json(&doc);
    }
    Ok(ExitCode::Command(if ok { 0 } else { 1 }))
}

/// One URL: the checks of its server (in `section`), or on a Cluster the Cluster's own
/// findings (in `top`) and a report per primary. `Err`: the server (the Cluster) did not
/// answer at all.
async fn examine(
    node: &mut RedisLock,
    key: Option<&str>,
    out: &mut Out,
    top: Option<Section>,
    section: Option<Section>,
) -> Result<(), LockError> {
    if let Some(section) = section {
        let slot = key.map(|key| {
            finding(
                "slot",
                Verdict::Info,
                format!("'{key}': not a Cluster, this server holds every key"),
            )
        });
        return server_checks(node, None, None, out, section, slot).await;
    }
    let shown = node.shown().to_string();
    let top = top.unwrap_or_else(|| out.section(&shown));
    let slots = match node
        .probe(redis::cmd("CLUSTER").arg("SLOTS").clone(), None)
        .await?
    {
        ProbeReply::Answer(v) => slot_ranges(&v),
        denied_or_error => {
            out.answered();
            let why = match denied_or_error {
                ProbeReply::Error(e) => format!("CLUSTER SLOTS: {e}"),
                _ => "CLUSTER SLOTS is denied to this user: the primaries cannot be listed".into(),
            };
            out.add(
                top,
                finding("cluster", Verdict::CannotCheck, why),
                Some(&shown),
            );
            return Ok(());
        }
    };
    out.answered();
    let mut primaries: Vec<(String, u16)> = Vec::new();
    let mut covered = 0u32;
    for (start, end, host, port) in &slots {
        covered += u32::from(end - start) + 1;
        if !primaries.contains(&(host.clone(), *port)) {
            primaries.push((host.clone(), *port));
        }
    }
    let f = if covered == 16384 {
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
    };
    out.add(top, f, Some(&shown));
    if let Some(key) = key {
        let slot = match node
            .probe(redis::cmd("CLUSTER").arg("KEYSLOT").arg(key).clone(), None)
            .await
        {
            Ok(ProbeReply::Answer(Value::Int(s))) => Some(s),
            _ => None,
        };
        let f = match slot {
            Some(slot) => {
                let owner = slots
                    .iter()
                    .find(|(start, end, _, _)| {
                        (i64::from(*start)..=i64::from(*end)).contains(&slot)
                    })
                    .map_or("no primary".to_string(), |(_, _, h, p)| format!("{h}:{p}"));
                finding(
                    "slot",
                    Verdict::Info,
                    format!("'{key}' is in slot {slot}, served by {owner} (its fence, queue and history too)"),
                )
            }
            None => finding(
                "slot",
                Verdict::CannotCheck,
                "CLUSTER KEYSLOT gave no answer",
            ),
        };
        out.add(top, f, Some(&shown));
    }
    for (host, port) in &primaries {
        let server = format!("{host}:{port} (of {shown})");
        let section = out.section(&server);
        let serves: Vec<(u16, u16)> = slots
            .iter()
            .filter(|(_, _, h, p)| h == host && p == port)
            .map(|(start, end, _, _)| (*start, *end))
            .collect();
        let at = Some((host.as_str(), *port));
        if let Err(e) = server_checks(node, at, Some(&serves), out, section, None).await {
            out.add(
                section,
                finding("connection", Verdict::Fail, e.to_string()),
                None,
            );
        }
    }
    Ok(())
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

/// A reply, or why the check that needed it cannot be made (`name`: the command, for that).
fn answer(probe: ProbeReply, name: &str) -> Result<Value, String> {
    match probe {
        ProbeReply::Answer(v) => Ok(v),
        ProbeReply::Denied => Err(format!("{name} is denied to this user")),
        ProbeReply::Error(e) => Err(format!("{name}: {e}")),
    }
}

/// One command: its reply, or why the check that needs it cannot be made.
async fn ask(
    node: &mut RedisLock,
    at: Option<(&str, u16)>,
    args: &[&str],
) -> Result<Result<Value, String>, LockError> {
    let name = args[..args.len().min(2)].join(" ");
    Ok(answer(node.probe(command(args), at).await?, &name))
}

fn command(args: &[&str]) -> redis::Cmd {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd
}

/// Every check of one server (`at`: a Cluster primary, serving `serves`), each finding added
/// to `section` as soon as it is known; `slot` goes after the cluster finding. `Err`: the
/// server did not answer the first request. A request that fails later makes its check
/// `cannot check` (the lock probe: `fail`, as a run would), and the others still go on.
async fn server_checks(
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

/// Checks whether the user may run every command lockrun sends or its scripts call, on a
/// sample key and a helper key beside it: by `ACL DRYRUN` (Redis 7.0+, needs ACL permission),
/// or else by `redis.acl_check_cmd` in a script, which needs nothing but EVAL, which lockrun's
/// own user has. Neither writes anything. `user`: what `ACL WHOAMI` answered, or why not.
async fn acl(
    node: &mut RedisLock,
    at: Option<(&str, u16)>,
    user: Result<String, String>,
) -> Result<Vec<Finding>, LockError> {
    let probes = checks::probes(
        node.probes_cluster(),
        &helper_key(checks::PROBE_KEY, "fence"),
        &wake_channel(checks::PROBE_KEY),
    );
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

/// `ACL DRYRUN <user> <command…>` for every probe, all in one round trip; `Err`: DRYRUN
/// itself cannot be asked.
async fn dry_run(
    node: &mut RedisLock,
    at: Option<(&str, u16)>,
    user: &str,
    probes: &[checks::AclProbe],
) -> Result<Result<Vec<(checks::AclProbe, AclVerdict)>, String>, LockError> {
    let cmds: Vec<redis::Cmd> = probes
        .iter()
        .map(|probe| {
            let mut args = vec!["ACL", "DRYRUN", user];
            args.extend(probe.line.iter().map(String::as_str));
            command(&args)
        })
        .collect();
    let replies = node.probe_all(&cmds, at).await?;
    let mut answers = Vec::new();
    for (probe, reply) in probes.iter().zip(replies) {
        let verdict = match reply {
            // The server knows no such command (or user): this check cannot say.
            ProbeReply::Error(e) if e.unknown => AclVerdict::Unknown,
            reply => match answer(reply, "ACL DRYRUN") {
                // "OK", or a sentence saying what is not permitted.
                Ok(Value::Okay) => AclVerdict::Allowed,
                Ok(v) if text(&v).as_deref() == Some("OK") => AclVerdict::Allowed,
                Ok(_) => AclVerdict::Denied,
                Err(e) => return Ok(Err(e)),
            },
        };
        answers.push((probe.clone(), verdict));
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
    probes: &[checks::AclProbe],
) -> Result<Result<Vec<(checks::AclProbe, AclVerdict)>, Option<String>>, LockError> {
    let asked: Vec<&checks::AclProbe> = probes.iter().filter(|p| p.line[0] != "EVAL").collect();
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(ACL_CHECK).arg(0);
    for p in &asked {
        cmd.arg(p.line.len()).arg(&p.line);
    }
    let reply = match node.probe(cmd, at).await? {
        ProbeReply::Answer(Value::Array(items)) if items.len() == asked.len() => items,
        ProbeReply::Denied => return Ok(Err(Some("EVAL is denied".into()))),
        _ => return Ok(Err(None)),
    };
    let mut answers: Vec<(checks::AclProbe, AclVerdict)> = probes
        .iter()
        .filter(|p| p.line[0] == "EVAL")
        .map(|p| (p.clone(), AclVerdict::Allowed))
        .collect();
    for (p, v) in asked.into_iter().zip(reply) {
        let verdict = match v {
            Value::Int(1) => AclVerdict::Allowed,
            Value::Int(0) => AclVerdict::Denied,
            _ => AclVerdict::Unknown,
        };
        answers.push((p.clone(), verdict));
    }
    Ok(Ok(answers))
}
