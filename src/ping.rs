//! `--ping`: health-check pings from the host that ran the job, in the convention of
//! healthchecks.io (and its self-hosted server, and the services that copied it): `<url>/start`
//! when the job starts, then `<url>` on success or `<url>/<exit code>` (`<url>/fail` when the
//! code is 0 yet the run failed) when it ends.
//!
//! What the end ping says is [`end_signal`], one match on the run's [`Ending`]: a new way for
//! a run to end is one arm there. Only a run that sent `/start` sends an end ping, so hosts
//! that skipped and runs that failed before taking the lock stay silent (the monitor's missing
//! success is what alerts on those).
//!
//! A ping never holds the lock or the exit code for long: the pings go out from a thread of
//! their own, started only by the first ping (a run without `--ping` builds no client and
//! starts no thread), in order (`/start` before the end); the end ping is sent once the lock is
//! released, and lockrun waits for it at most [`END_BOUND`]. That thread writes nothing:
//! what became of the pings is said in one line by the main thread at the end (a warning if
//! any was not delivered). The URL is a secret (anyone holding it can report for the check):
//! only its scheme and host are ever said ([`Target::shown`]).

use crate::ending::Ending;
use crate::lock::Outcome;
use std::cell::RefCell;
use std::sync::mpsc;
use std::time::{Duration, Instant};
use url::Url;

mod http;

/// Who the pings say they come from.
const USER_AGENT: &str = concat!("lockrun/", env!("CARGO_PKG_VERSION"));

/// The longest lockrun waits for the pings once the run is over (and the lock released):
/// the end ping, and a start ping still in flight before it.
pub const END_BOUND: Duration = Duration::from_secs(5);

/// How long the start ping is tried for; nothing waits on it while the job runs.
const START_BOUND: Duration = Duration::from_secs(10);

/// One request's bound (connection, TLS, answer): a monitor that does not answer within it is
/// tried again while the ping's bound lasts.
const ATTEMPT: Duration = Duration::from_secs(2);

/// Tries of one ping: the first and three more.
const ATTEMPTS: u32 = 4;

/// The pause before the first retry, doubled before each next one.
const FIRST_BACKOFF: Duration = Duration::from_millis(200);

/// What a ping says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// This host took the lock and starts the job: `<url>/start`.
    Start,
    /// The job succeeded: `<url>` itself, which every dead-man's switch reads as success.
    Success,
    /// The run failed, with lockrun's exit code: `<url>/<code>`, or `<url>/fail` for a failure
    /// whose code is 0 (a lost lock or a stop, with a job that exited 0).
    Fail(u8),
}

impl Signal {
    /// What is appended to the URL's path.
    fn suffix(self) -> String {
        match self {
            Signal::Start => "/start".into(),
            Signal::Success => String::new(),
            Signal::Fail(0) => "/fail".into(),
            Signal::Fail(code) => format!("/{code}"),
        }
    }

    /// Its name in lockrun's own lines.
    fn name(self) -> String {
        match self {
            Signal::Start => "start".into(),
            Signal::Success => "success".into(),
            Signal::Fail(0) => "fail".into(),
            Signal::Fail(code) => format!("fail (exit {code})"),
        }
    }
}

/// The end ping of a run that sent `/start` and ended as `ending`; `None`: none.
///
/// Success is the job's exit 0 and nothing else; a lost lock, a stop, a time limit and an error
/// are failures whatever the job's own code was.
pub fn end_signal(ending: &Ending) -> Option<Signal> {
    let code = u8::try_from(ending.code.code()).unwrap_or(u8::MAX);
    match ending.outcome {
        Outcome::Ran if code == 0 => Some(Signal::Success),
        Outcome::Ran | Outcome::Lost | Outcome::Aborted | Outcome::Timeout | Outcome::Error => {
            Some(Signal::Fail(code))
        }
        // The lease ran out before the job could start and the wait with it: the job did not
        // run here. The host that runs it pings; if none does, the missing success alerts.
        Outcome::Skipped => None,
        // Not a run's ending: an operator's `release --force`.
        Outcome::Released => None,
    }
}

/// A checked ping URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    url: Url,
}

impl Target {
    /// The URL of `--ping` / `LOCKRUN_PING_URL`; the reason it is refused names no part of it.
    ///
    /// The URL parser forgives what a ping URL must not have: it takes `https:host`,
    /// `https:/host`, `https:///host` and backslashes for `https://host`, and drops tabs and
    /// newlines anywhere. So `https://$HC_HOST/<uuid>` with HC_HOST unset would make the secret
    /// the host, said in every warning and sent to DNS. A URL is taken only as written
    /// `http://HOST…` or `https://HOST…` with a [`plausible_host`].
    pub fn parse(text: &str) -> Result<Target, String> {
        if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err("a space or control character in the URL".into());
        }
        let url = Url::parse(text).map_err(|e| format!("not a URL ({e})"))?;
        match url.scheme() {
            "http" => {}
            "https" if cfg!(feature = "tls") => {}
            "https" => return Err("https:// needs lockrun built with TLS (its tls feature)".into()),
            _ => return Err("not an http:// or https:// URL".into()),
        }
        // The text starts with the scheme as the parser read it (no leading space is left).
        let rest = &text[url.scheme().len() + 1..];
        let written_host = rest
            .strip_prefix("//")
            .is_some_and(|r| !r.starts_with(['/', '\\', '?', '#']));
        if !written_host {
            return Err(format!(
                "no host after {}:// (is a variable in the URL unset?)",
                url.scheme()
            ));
        }
        match url.host() {
            Some(url::Host::Ipv4(_) | url::Host::Ipv6(_)) => {}
            Some(url::Host::Domain(name)) => plausible_host(name).map_err(|why| {
                format!("its host cannot be right ({why}): is the path glued to the host without a '/'?")
            })?,
            None => return Err("no host in the URL".into()),
        }
        Ok(Target { url })
    }

    /// The URL `signal` of the run `rid` is sent to: the suffix appended to the path (a
    /// trailing `/` dropped first), the query kept (healthchecks.io's `?create=1`) with `rid`
    /// added, no fragment.
    pub fn url_for(&self, signal: Signal, rid: &str) -> Url {
        let mut url = self.url.clone();
        let path = format!("{}{}", url.path().trim_end_matches('/'), signal.suffix());
        url.set_path(if path.is_empty() { "/" } else { &path });
        let query = match url.query() {
            Some(q) if !q.is_empty() => format!("{q}&rid={rid}"),
            _ => format!("rid={rid}"),
        };
        url.set_query(Some(&query));
        url.set_fragment(None);
        url
    }

    /// What lockrun's lines say of the URL: its scheme and host (and a port given), never its
    /// path, query or user part, where the secret is.
    pub fn shown(&self) -> String {
        let host = self.url.host_str().unwrap_or_default();
        match self.url.port() {
            Some(port) => format!("{}://{host}:{port}/…", self.url.scheme()),
            None => format!("{}://{host}/…", self.url.scheme()),
        }
    }
}

/// Whether `name`, a URL's host name, can be a host's rather than a secret glued to one
/// (`https://hc-ping.com<uuid>`, `https://<uuid>`): no label of it is a UUID, and the last
/// label of a name with several (one trailing dot allowed) has the shape every top-level domain
/// has, letters only (or an `xn--` name), at most 24 of them. A single-label name (localhost, a
/// compose or Kubernetes service) is otherwise taken as given. IP addresses are not names.
fn plausible_host(name: &str) -> Result<(), &'static str> {
    let labels: Vec<&str> = name.strip_suffix('.').unwrap_or(name).split('.').collect();
    if labels.iter().any(|l| uuid::Uuid::try_parse(l).is_ok()) {
        return Err("a label of it is a UUID");
    }
    let last = labels[labels.len() - 1];
    let tld_like = last.starts_with("xn--")
        || (1..=24).contains(&last.len()) && last.bytes().all(|b| b.is_ascii_alphabetic());
    if labels.len() > 1 && !tld_like {
        return Err("its last label is no top-level domain: letters only, at most 24");
    }
    Ok(())
}

/// What became of one ping.
type Delivery = (Signal, Result<(), String>);

/// The pings of one run: `/start` once the job is about to start ([`Pinger::start`]), the
/// end ping once the run is over ([`Pinger::finish`]), both with the run's id.
pub struct Pinger {
    target: Target,
    /// The run id (healthchecks.io's `rid`, a UUID v4, as runitor sends): a monitor pairs each
    /// `/start` with the end ping that carries the same, where runs overlap (`--shared`,
    /// `--limit`, a standby's hand-on) or a start's end never comes.
    rid: String,
    sender: RefCell<Option<Sender>>,
}

/// The thread sending the pings: where to hand it the end ping, and its account of what was
/// delivered (or why it could not be started).
enum Sender {
    Running {
        end: mpsc::Sender<(Signal, Instant)>,
        report: mpsc::Receiver<Vec<Delivery>>,
    },
    NotStarted(String),
}

impl Pinger {
    pub fn new(target: Target) -> Pinger {
        Pinger {
            target,
            rid: uuid::Uuid::new_v4().to_string(),
            sender: RefCell::new(None),
        }
    }

    /// Sends `/start`, without waiting for it: the job starts at once. Once per run (a lease
    /// that expired before the job could start is taken again without a second `/start`).
    pub fn start(&self) {
        let mut sender = self.sender.borrow_mut();
        if sender.is_some() {
            return;
        }
        let (end_tx, end_rx) = mpsc::channel::<(Signal, Instant)>();
        let (report_tx, report_rx) = mpsc::channel();
        let (target, rid) = (self.target.clone(), self.rid.clone());
        let spawned = std::thread::Builder::new()
            .name("lockrun-ping".into())
            .spawn(move || {
                block_signals();
                let client = http::Client::new(&target.url, USER_AGENT);
                let start_by = Instant::now() + START_BOUND;
                // The start ping's pauses between attempts wait for the run's end: once it is
                // over, the end ping goes out instead of more tries of the start.
                let mut end = None;
                let mut over = false;
                let mut pause = |d| match end_rx.recv_timeout(d) {
                    Ok(ending) => {
                        end = Some(ending);
                        false
                    }
                    Err(mpsc::RecvTimeoutError::Timeout) => true,
                    Err(mpsc::RecvTimeoutError::Disconnected) => {
                        over = true;
                        false
                    }
                };
                let url = |signal| target.url_for(signal, &rid);
                let started = send(&client, &url(Signal::Start), start_by, &mut pause);
                let mut delivered = vec![(Signal::Start, started)];
                // The end ping, once the run is over; none if the run sends none.
                if end.is_none() && !over {
                    end = end_rx.recv().ok();
                }
                if let Some((signal, by)) = end {
                    let mut sleep = |d| {
                        std::thread::sleep(d);
                        true
                    };
                    delivered.push((signal, send(&client, &url(signal), by, &mut sleep)));
                }
                let _ = report_tx.send(delivered);
            });
        *sender = Some(match spawned {
            Ok(_) => Sender::Running {
                end: end_tx,
                report: report_rx,
            },
            Err(e) => Sender::NotStarted(e.to_string()),
        });
    }

    /// Sends the end ping of a run that ended as `ending` (if it sent `/start`) and waits for
    /// the pings, at most [`END_BOUND`]; says in one line what became of them. Called once the
    /// lock is released.
    pub fn finish(&self, ending: &Ending) {
        let Some(sender) = self.sender.borrow_mut().take() else {
            return;
        };
        let shown = self.target.shown();
        let (end, report) = match sender {
            Sender::Running { end, report } => (end, report),
            Sender::NotStarted(why) => {
                tracing::warn!(url = %shown, "health-check ping not delivered: cannot start a thread for it: {why}");
                return;
            }
        };
        let by = Instant::now() + END_BOUND;
        if let Some(signal) = end_signal(ending) {
            let _ = end.send((signal, by));
        }
        drop(end);
        // The last attempt is cut at `by` by its own timeout: a little slack for it to return.
        let delivered = match report.recv_timeout(END_BOUND + Duration::from_millis(250)) {
            Ok(delivered) => delivered,
            Err(_) => {
                tracing::warn!(url = %shown, "health-check ping not delivered: no answer within {}s; not waiting longer", END_BOUND.as_secs());
                return;
            }
        };
        let failed: Vec<String> = delivered
            .iter()
            .filter_map(|(signal, result)| {
                let why = result.as_ref().err()?;
                Some(format!("{}: {why}", signal.name()))
            })
            .collect();
        let names: Vec<String> = delivered.iter().map(|(s, _)| s.name()).collect();
        // The last ping is what the monitor now shows: a start ping given up for the end ping
        // that then got through leaves the check right (only its duration is missing).
        let last_failed = delivered.last().is_some_and(|(_, result)| result.is_err());
        if failed.is_empty() {
            tracing::debug!(url = %shown, "health-check pings sent: {}", names.join(", "));
        } else if last_failed {
            tracing::warn!(url = %shown, "health-check ping not delivered: {}", failed.join("; "));
        } else {
            tracing::debug!(url = %shown, "health-check pings sent: {}; not delivered: {}", names.join(", "), failed.join("; "));
        }
    }
}

/// The pings' thread takes no signal: they are the main thread's (its handlers hand them to
/// the run), and a handler run on this thread would only interrupt a request.
fn block_signals() {
    use nix::sys::signal::{pthread_sigmask, SigSet, SigmaskHow};
    // pthread_sigmask(2) on this thread only; it cannot fail with a valid `how`.
    let _ = pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&SigSet::all()), None);
}

/// Sends a ping to `url`, trying again after a connection error, a timeout or an answer that
/// says to (5xx, 408, 429), at most [`ATTEMPTS`] times and until `by`; `pause` waits between
/// two attempts and says whether to go on.
fn send(
    client: &http::Client,
    url: &Url,
    by: Instant,
    pause: &mut dyn FnMut(Duration) -> bool,
) -> Result<(), String> {
    let mut backoff = FIRST_BACKOFF;
    let mut attempts = 0;
    loop {
        attempts += 1;
        let left = by.saturating_duration_since(Instant::now());
        let (why, again) = match client.get(url, left.min(ATTEMPT)) {
            Ok(200..=299) => return Ok(()),
            // A redirect is answered, not followed: a monitor's ping URL does not move.
            Ok(code @ 300..=399) => {
                return Err(format!(
                    "HTTP {code} (a redirect, not followed: ping the URL it names)"
                ))
            }
            Ok(code) => (format!("HTTP {code}"), passing(code)),
            Err(e @ http::Error::Proxy(code)) => (describe(&e), passing(code)),
            Err(e) => (describe(&e), true),
        };
        if !again || attempts == ATTEMPTS || Instant::now() + backoff >= by {
            return Err(why);
        }
        if !pause(backoff) {
            return Err(why);
        }
        backoff *= 2;
    }
}

/// Whether an answer with status `code` says that trying again may help.
fn passing(code: u16) -> bool {
    code >= 500 || code == 408 || code == 429
}

/// The TLS error behind an I/O error (rustls' errors reach the stream's reader as I/O errors).
fn tls_error(e: &std::io::Error) -> Option<String> {
    #[cfg(feature = "tls")]
    if let Some(why) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
        return Some(why.to_string());
    }
    let _ = e;
    None
}

/// Why a ping got no answer, in words that cannot contain the URL.
fn describe(error: &http::Error) -> String {
    use http::Error::*;
    match error {
        HostNotFound => "host not found".into(),
        Connect(e) => format!("connection failed: {e}"),
        Timeout => "no answer in time".into(),
        Io(e) => match tls_error(e) {
            Some(why) => format!("TLS: {why}"),
            None => e.to_string(),
        },
        Protocol => "not an HTTP answer".into(),
        Proxy(code) => format!("the proxy answered HTTP {code} to CONNECT"),
        #[cfg(feature = "tls")]
        Tls(why) => format!("TLS: {why}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ending::{decide, Course, JobEnd, Stopped};
    use crate::exit_codes::ExitCode::*;

    fn ran(
        status: crate::exit_codes::ExitCode,
        stopped: Stopped,
        lost: bool,
        stop: bool,
    ) -> Course {
        Course::Ran {
            job: JobEnd {
                status,
                stopped,
                lock_lost: lost,
            },
            stop_received: stop,
            key_gone: false,
        }
    }

    #[test]
    fn each_ending_has_its_end_ping() {
        let rows = [
            (
                ran(Command(0), Stopped::No, false, false),
                Some(Signal::Success),
            ),
            (
                ran(Command(3), Stopped::No, false, false),
                Some(Signal::Fail(3)),
            ),
            // Killed by a signal nobody sent through lockrun: the shell's 128+N.
            (
                ran(Signaled(9), Stopped::No, false, false),
                Some(Signal::Fail(137)),
            ),
            // --on-lost terminate: exit 76.
            (
                ran(Signaled(15), Stopped::Lock, true, false),
                Some(Signal::Fail(76)),
            ),
            // --on-lost continue and a job that exited 0: a failure all the same.
            (
                ran(Command(0), Stopped::No, true, false),
                Some(Signal::Fail(0)),
            ),
            // Stopped by a forwarded SIGTERM; a job that trapped it and exited 0 too.
            (
                ran(Signaled(15), Stopped::Signal, false, true),
                Some(Signal::Fail(143)),
            ),
            (
                ran(Command(0), Stopped::Signal, false, true),
                Some(Signal::Fail(0)),
            ),
            // Stopped by --time-limit: GNU timeout's 124, whatever the job made of the SIGTERM.
            (
                ran(Signaled(15), Stopped::TimeLimit, false, false),
                Some(Signal::Fail(124)),
            ),
            // Taken, but the command could not be started.
            (Course::Failed(NotFound), Some(Signal::Fail(127))),
            (Course::Failed(NotExecutable), Some(Signal::Fail(126))),
            (Course::Aborted(libc::SIGTERM), Some(Signal::Fail(143))),
            (
                Course::Skipped {
                    code: 75,
                    leased: true,
                },
                None,
            ),
            (
                Course::Skipped {
                    code: 0,
                    leased: false,
                },
                None,
            ),
        ];
        for (course, signal) in rows {
            assert_eq!(end_signal(&decide(course)), signal, "{course:?}");
        }
        // The key found gone at release after a job that exited 0.
        let gone = decide(ran(Command(0), Stopped::No, false, false)).key_gone();
        assert_eq!(end_signal(&gone), Some(Signal::Fail(0)));
    }

    #[test]
    fn each_signal_has_its_url() {
        let rid = "0b7e9a7c-3c7e-4d0e-9f5a-2f1d8c6b4a10";
        let target = Target::parse("https://hc-ping.com/0ab4c-uuid").unwrap();
        let at = |s| target.url_for(s, rid).to_string();
        assert_eq!(
            at(Signal::Start),
            format!("https://hc-ping.com/0ab4c-uuid/start?rid={rid}")
        );
        assert_eq!(
            at(Signal::Success),
            format!("https://hc-ping.com/0ab4c-uuid?rid={rid}")
        );
        assert_eq!(
            at(Signal::Fail(0)),
            format!("https://hc-ping.com/0ab4c-uuid/fail?rid={rid}")
        );
        assert_eq!(
            at(Signal::Fail(76)),
            format!("https://hc-ping.com/0ab4c-uuid/76?rid={rid}")
        );
        // A slug URL that creates its check, with a trailing slash and a fragment.
        let slug = Target::parse("http://hc.example:8000/ping/key/backup/?create=1#x").unwrap();
        assert_eq!(
            slug.url_for(Signal::Start, rid).to_string(),
            format!("http://hc.example:8000/ping/key/backup/start?create=1&rid={rid}")
        );
        assert_eq!(
            slug.url_for(Signal::Success, rid).to_string(),
            format!("http://hc.example:8000/ping/key/backup?create=1&rid={rid}")
        );
        let bare = Target::parse("http://127.0.0.1:9/?").unwrap();
        assert_eq!(
            bare.url_for(Signal::Success, rid).to_string(),
            format!("http://127.0.0.1:9/?rid={rid}")
        );
        assert_eq!(
            bare.url_for(Signal::Fail(1), rid).to_string(),
            format!("http://127.0.0.1:9/1?rid={rid}")
        );
    }

    #[test]
    fn every_form_of_a_real_host_is_taken() {
        for good in [
            "https://hc-ping.com/5bf66975-d4c7-4bf5-bcc8-b8d8a82ea278",
            "HTTPS://HC-PING.COM/uuid",
            "https://hc-ping.com./uuid",
            "https://user:pw@hc-ping.com:8443/uuid",
            "http://127.0.0.1:8000/ping/uuid",
            "http://[::1]:8000/ping/uuid",
            "http://localhost:8000/ping/uuid",
            "http://healthchecks:8000/ping/uuid",
            "http://healthchecks-web2:8000/ping/uuid",
            "http://hc.monitoring.svc.cluster.local/ping/uuid",
            "http://hc.internal/ping/uuid",
            "https://hc.example.xn--p1ai/uuid",
            "https://hc.example.travelersinsurance/uuid",
        ] {
            assert!(
                Target::parse(good).is_ok(),
                "{good}: {:?}",
                Target::parse(good)
            );
        }
    }

    #[test]
    fn a_refused_url_is_not_echoed() {
        let uuid = "5bf66975-d4c7-4bf5-bcc8-b8d8a82ea278";
        for bad in [
            "hc-ping.com/secret".to_string(),
            "ftp://hc-ping.com/secret".into(),
            "file:///secret".into(),
            "http://".into(),
            "http://:80/secret".into(),
            "secret".into(),
            // A variable for the host unset, a scheme without its slashes.
            format!("https:///{uuid}"),
            format!("https://{uuid}"),
            format!("http:{uuid}"),
            format!("http:/{uuid}"),
            format!("https:\\\\{uuid}"),
            format!("https://?{uuid}"),
            // A base URL glued to the secret.
            format!("https://hc-ping.com{uuid}"),
            format!("https://hc-ping.com{}", uuid.replace('-', "")),
            "https://hc-ping.comAbCdEfGhIjKlMnOpQrStUv/backup".into(),
            "https://nosnch.in0a1b2c3d4e".into(),
            // Whitespace the parser would drop or encode.
            format!("https://hc-ping.com/\t{uuid}"),
            format!(" https://hc-ping.com/{uuid}"),
        ] {
            let why = Target::parse(&bad).unwrap_err();
            for part in ["secret", &uuid[..8], "AbCdEf", "0a1b2c"] {
                assert!(!why.contains(part), "{bad}: {why}");
            }
        }
    }

    #[test]
    fn only_scheme_and_host_are_shown() {
        let t = Target::parse("https://user:pw@hc-ping.com/secret-uuid?k=secret").unwrap();
        assert_eq!(t.shown(), "https://hc-ping.com/…");
        let t = Target::parse("http://127.0.0.1:27001/secret").unwrap();
        assert_eq!(t.shown(), "http://127.0.0.1:27001/…");
    }
}
