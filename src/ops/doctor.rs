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
//! tell 1 %), so doctor takes about a second per server.
//!
//! Here: which servers a URL names, and their reports as they grow and are printed. One
//! server's checks are asked in `server.rs` (the ACL's in `acl.rs`; one question and its
//! reply in `ask.rs`); the verdicts are in `checks`.

mod acl;
mod ask;
mod checks;
mod server;

use super::print_json;
use crate::exit_codes::ExitCode;
use crate::lock::probe::ProbeReply;
use crate::lock::redis::RedisLock;
use crate::lock::LockError;
use ask::text;
use checks::{finding, Finding, Verdict};
use redis::Value;
use serde_json::json;
use server::server_checks;

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
        ProbeReply::Replied(v) => slot_ranges(&v),
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
            Ok(ProbeReply::Replied(Value::Int(s))) => Some(s),
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
