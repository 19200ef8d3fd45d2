//! One run of lockrun: take the lock (waiting if asked), run the job under the watchdog,
//! release, and report how it ended.

use crate::cli::{Args, Connection, OnLost};
use crate::duration::{Human, Wait};
use crate::exit_codes::ExitCode;
use crate::lock::backend::Backend;
use crate::lock::redis::{Access, RedisLock};
use crate::lock::redlock::Redlock;
use crate::lock::url::{password_from, Credentials, TlsFiles};
use crate::lock::{
    describe_holder, Acquire, Holder, Lease, LockError, LockService, LockSpec, Note, Outcome,
    Release,
};
use crate::metrics::RunRecord;
use crate::signals::{self, Signals};
use crate::supervisor::{self, Guard, Job, SpawnError};
use crate::watchdog::{self, Deadline, Lost};
use std::cell::Cell;
use std::time::Duration;
use tokio::time::Instant;
use tracing::{debug, error, info, warn};

/// Bound on connecting and on each reply: well below the TTL so a dead server is noticed with
/// time to spare, never the OS's minutes-long TCP default.
pub fn request_timeout(ttl: Duration) -> Duration {
    (ttl / 3).clamp(Duration::from_millis(50), Duration::from_secs(3))
}

/// Bound on each master's reply under Redlock: a tenth of the TTL (10 ms..1 s), so that one
/// dead master costs little of the lease while the others answer.
pub fn node_timeout(ttl: Duration) -> Duration {
    (ttl / 10).clamp(Duration::from_millis(10), Duration::from_secs(1))
}

/// The lock to run on: one server for one URL, Redlock over 3 or more. Every error is a usage
/// error (bad URL, 2 URLs, --limit with several, a --node-timeout that does not fit the TTL).
fn backend(args: &Args) -> Result<Backend, String> {
    let urls = args.redis_urls()?;
    let timeout = match args.conn.node_timeout {
        // Below TTL/3: a renewal is due every TTL/3, and one request must not outlast that.
        Some(t) if t.is_zero() || t >= args.ttl / 3 => {
            return Err(format!(
                "--node-timeout (LOCKRUN_NODE_TIMEOUT) {} must be more than 0 and below TTL/3 ({})",
                Human(t),
                Human(args.ttl / 3)
            ))
        }
        Some(t) => t,
        None if urls.len() == 1 => request_timeout(args.ttl),
        None => node_timeout(args.ttl),
    };
    let access = access(&args.conn)?;
    if access.insecure {
        warn!("--tls-insecure: the server's certificate is not verified; anyone on the network path can impersonate it");
    }
    let mut nodes = urls
        .iter()
        .map(|url| {
            RedisLock::new(url, &access, timeout).map(|l| l.with_acks(args.acks, args.fsync))
        })
        .collect::<Result<Vec<_>, _>>()?;
    crate::lock::redlock::distinct(&nodes)?;
    Ok(match nodes.len() {
        1 => Backend::One(nodes.remove(0)),
        _ => Backend::Quorum(Redlock::new(nodes, timeout)),
    })
}

/// One run; `record` gets what happened along the way (wait, fence, held, renewals, a lost
/// lock), the caller adds how it ended.
pub async fn run(args: Args, signals: &mut Signals, record: &mut RunRecord) -> ExitCode {
    // The run's start as its metrics count it: history durations and metrics agree.
    let started = Instant::from_std(record.started());
    let spec = LockSpec {
        key: args.key.clone(),
        ttl: args.ttl,
        limit: args.limit,
        history: args.history,
        every: args.every,
    };
    record.every = args.every;
    if args.command[0].is_empty() {
        error!("the command name is empty: nothing to run");
        return ExitCode::Usage;
    }
    let hold = match args.hold() {
        Ok(hold) => hold,
        Err(msg) => {
            error!("{msg}");
            return ExitCode::Usage;
        }
    };
    let mut lock = match backend(&args) {
        Ok(lock) => lock,
        Err(msg) => {
            error!("{msg}");
            return ExitCode::Usage;
        }
    };
    let opts = supervisor::Options {
        group: !args.no_group,
        // A subreaper bit inherited across exec (from a supervisor that set it and exec'd us)
        // makes orphans ours too: they must be reaped or they pile up as zombies.
        reap_all: args.subreaper
            || std::process::id() == 1
            || nix::sys::prctl::get_child_subreaper().unwrap_or(false),
        kill_after: args.kill_after,
        mask: signals.original_mask(),
    };

    if let Some((token, fence)) = reentrant_token(&spec.key) {
        match lock.is_held_by(&spec, &token).await {
            Ok(true) => {
                info!(key = %spec.key, "redis lock already held by this job (reentrant)");
                // The outer lockrun holds the lock (and records its fence and renewals). The
                // job runs under that holder's key, token and fence, whichever enclosing
                // lockrun it is (A → B → A: A's, not B's).
                record.wait = record.elapsed();
                let env = [
                    ("LOCKRUN_KEY", spec.key.clone()),
                    ("LOCKRUN_TOKEN", token),
                    ("LOCKRUN_FENCE", fence),
                ];
                let job = match Job::spawn(&args.command, &env, &opts, None) {
                    Ok(job) => job,
                    Err(e) => {
                        error!("{e}");
                        return e.exit_code();
                    }
                };
                type Unguarded = std::future::Pending<Lost>;
                return supervisor::supervise(job, signals, None::<Guard<'_, Unguarded>>).await;
            }
            Ok(false) => debug!("LOCKRUN_TOKEN no longer holds the key; locking normally"),
            Err(e) => return unavailable(&e),
        }
    }

    let holder = Holder::new(&args.command[0]);
    let waiting = !args.wait.is_zero();
    let wait_until = match args.wait {
        Wait::For(d) => Some(Instant::now() + d),
        Wait::Forever => None,
    };
    let grace = watchdog::loss_grace(spec.ttl, args.kill_after);
    // Said once, when a job is about to start: a skipped cron tick stays one line.
    let mut clamp_note = grace < args.kill_after && args.on_lost == OnLost::Terminate;
    loop {
        let attempt = acquire(
            &mut lock, &spec, &holder, wait_until, waiting, signals, started,
        );
        let attempt = attempt.await;
        record.wait = record.elapsed();
        let lease = match attempt {
            Ok(lease) => lease,
            Err(Failed::Conflict(holder_started)) => {
                // With the same crontab everywhere, the holder's start is this tick's run.
                record.job_started = holder_started;
                return ExitCode::Conflict(args.conflict_exit_code);
            }
            Err(Failed::Aborted(sig)) => return ExitCode::Aborted(sig),
            Err(Failed::Code(code)) => return code,
        };
        let acquired_at = Instant::now();
        record.fence = lease.fence;
        info!(key = %spec.key, ttl = %Human(spec.ttl), fence = lease.fence, "redis lock acquired, starting job");
        if std::mem::take(&mut clamp_note) {
            info!(kill_after = %Human(args.kill_after), ttl = %Human(spec.ttl), grace = %Human(grace),
                  "--kill-after is longer than TTL/3: if the lock is lost, the job gets SIGTERM only this grace before its lease can expire");
        }

        let env = [
            ("LOCKRUN_KEY", spec.key.clone()),
            ("LOCKRUN_TOKEN", holder.token.clone()),
            ("LOCKRUN_FENCE", lease.fence.to_string()),
            (
                "LOCKRUN_HELD",
                held_with(&spec.key, &holder.token, lease.fence),
            ),
        ];
        // A signal that arrived while we were acquiring: the job must not start.
        if let Some(sig) = signals.take_abort() {
            info!(signal = %signals::name(sig), "interrupted before the command started");
            let code = ExitCode::Aborted(sig);
            let note = note(Outcome::Aborted, Some(code), started);
            release(&mut lock, &spec, &lease, Duration::ZERO, Some(&note)).await;
            record.held += acquired_at.elapsed();
            return code;
        }
        let deadline = Deadline::new(&lease, spec.ttl, lock.drift(spec.ttl), args.kill_after);
        // The hold (--every, --min-hold) keeps the tick from the other hosts only for a job
        // that started: a command that could not be started gives the tick back at once, so a
        // broken host cannot take it from a healthy one.
        let mut keep = Duration::ZERO;
        let code = match Job::spawn(&args.command, &env, &opts, Some(deadline.term_at())) {
            Ok(job) => {
                record.job_started = Some(std::time::SystemTime::now());
                let stats = watchdog::Stats::default();
                // The watchdog resolves only when the lock is lost; with --on-lost continue
                // that is the only trace of it (the exit code is then the job's own).
                let lost = Cell::new(false);
                let guard = Guard {
                    lost: async {
                        let why = watchdog::run(&mut lock, &spec, &lease, &deadline, &stats).await;
                        lost.set(true);
                        why
                    },
                    deadline: &deadline,
                    terminate: args.on_lost == OnLost::Terminate,
                };
                let code = supervisor::supervise(job, signals, Some(guard)).await;
                keep = hold.saturating_sub(lease.confirmed_at.elapsed());
                record.renewals = stats.renewals.get();
                record.renewal_failures = stats.failures.get();
                record.lost = lost.get() || code == ExitCode::LockLost;
                code
            }
            Err(SpawnError::LeaseExpired) => {
                warn!(key = %spec.key, "redis lock lease expired before the command could start (lockrun was delayed); not starting it");
                record.held += acquired_at.elapsed();
                if waiting && wait_until.is_none_or(|d| Instant::now() < d) {
                    release(&mut lock, &spec, &lease, Duration::ZERO, None).await;
                    continue;
                }
                let code = ExitCode::Conflict(args.conflict_exit_code);
                let note = note(Outcome::Skipped, Some(code), started);
                release(&mut lock, &spec, &lease, Duration::ZERO, Some(&note)).await;
                return code;
            }
            Err(e) => {
                error!("{e}");
                e.exit_code()
            }
        };
        // The run's history entry says what its metrics say (see `metrics::outcome_of`).
        let lost = record.lost || code == ExitCode::LockLost;
        let outcome = crate::metrics::outcome_of(code, lost, signals.interrupted().is_some());
        let note = note(outcome, Some(code), started);
        if release(&mut lock, &spec, &lease, keep, Some(&note)).await == Released::Gone {
            // The key was gone or another holder's before the release: the job ran without
            // the lock for a while, like a loss a renewal finds. Its history entry says so
            // already (the release script recorded `lost`); the metrics say the same.
            record.lost = true;
        }
        record.held += acquired_at.elapsed();
        return code;
    }
}

/// What a release found.
#[derive(Debug, PartialEq, Eq)]
enum Released {
    /// Deleted, kept for the hold, or failed (the TTL frees it).
    Done,
    /// The key was no longer ours: lost while the job ran.
    Gone,
}

/// How to reach and authenticate to the server(s), from the options and the environment.
pub fn access(args: &Connection) -> Result<Access, String> {
    let env = |name: &str| std::env::var_os(name);
    Ok(Access {
        creds: Credentials::from_options(
            args.redis_user.as_deref(),
            env("LOCKRUN_REDIS_PASSWORD"),
            args.redis_password_file.as_deref(),
        )?,
        tls: TlsFiles {
            ca: args.tls_ca.clone(),
            cert: args.tls_cert.clone(),
            key: args.tls_key.clone(),
        },
        sentinel_password: password_from(
            "LOCKRUN_SENTINEL_PASSWORD",
            env("LOCKRUN_SENTINEL_PASSWORD"),
            args.sentinel_password_file.as_deref(),
        )?,
        insecure: args.tls_insecure,
    })
}

/// A nested lockrun of a key that one of its enclosing lockruns holds gets that one's token
/// and fence: the nearest's from `LOCKRUN_KEY`/`LOCKRUN_TOKEN`/`LOCKRUN_FENCE`, any other's from
/// `LOCKRUN_HELD` (so A → B → A is reentrant, not a deadlock with its own ancestor).
fn reentrant_token(key: &str) -> Option<(String, String)> {
    let var = |name: &str| std::env::var(name).ok();
    let nearest = var("LOCKRUN_KEY").filter(|k| k == key).and_then(|_| {
        Some((
            var("LOCKRUN_TOKEN")?,
            var("LOCKRUN_FENCE").unwrap_or_default(),
        ))
    });
    let wanted = key_digest(key);
    let (token, fence) = nearest
        .or_else(|| held_entries().find_map(|e| (e.key == wanted).then_some((e.token, e.fence))))?;
    (!token.is_empty()).then_some((token, fence))
}

/// One enclosing holder in `LOCKRUN_HELD`: `<SHA-1 of the key>:<token>:<fence>`, the entries
/// comma-separated. A digest, not the key: any key is one plain word of 40 characters that way
/// (newlines and commas included), and a long key (up to 128 KiB) would not fit twice in the
/// command's environment.
struct HeldEntry {
    key: String,
    token: String,
    fence: String,
}

fn held_entries() -> impl Iterator<Item = HeldEntry> {
    let held = std::env::var("LOCKRUN_HELD").unwrap_or_default();
    let entries: Vec<HeldEntry> = held
        .split(',')
        .filter_map(|e| {
            let mut parts = e.splitn(3, ':');
            Some(HeldEntry {
                key: parts.next()?.to_string(),
                token: parts.next()?.to_string(),
                fence: parts.next().unwrap_or_default().to_string(),
            })
        })
        .collect();
    entries.into_iter()
}

/// `LOCKRUN_HELD` for the job: every enclosing holder's entry (an older lockrun's
/// `LOCKRUN_KEY`/`LOCKRUN_TOKEN` among them), then this one's. A list that would outgrow one
/// environment entry drops its oldest entries first.
fn held_with(key: &str, token: &str, fence: u64) -> String {
    let own = key_digest(key);
    let mut entries: Vec<HeldEntry> = held_entries().filter(|e| e.key != own).collect();
    if let (Ok(k), Ok(t)) = (std::env::var("LOCKRUN_KEY"), std::env::var("LOCKRUN_TOKEN")) {
        let k = key_digest(&k);
        if k != own && !entries.iter().any(|e| e.key == k) {
            let fence = std::env::var("LOCKRUN_FENCE").unwrap_or_default();
            entries.push(HeldEntry {
                key: k,
                token: t,
                fence,
            });
        }
    }
    entries.push(HeldEntry {
        key: own,
        token: token.to_string(),
        fence: fence.to_string(),
    });
    let mut text: Vec<String> = entries
        .into_iter()
        .map(|e| format!("{}:{}:{}", e.key, e.token, e.fence))
        .collect();
    while text.iter().map(|e| e.len() + 1).sum::<usize>() > 64 * 1024 && text.len() > 1 {
        text.remove(0);
    }
    text.join(",")
}

fn key_digest(key: &str) -> String {
    crate::lock::public_id(key)
}

enum Failed {
    /// Held elsewhere; when the holder was started, if its value says (`started=`).
    Conflict(Option<std::time::SystemTime>),
    Aborted(i32),
    Code(ExitCode),
}

fn unavailable(e: &LockError) -> ExitCode {
    error!("{e}");
    e.exit_code()
}

/// How often a waiter renews its place in the queue (tickets last `TICKET`, 3 s). Doubles as
/// a poll, so a lost wake-up hint costs at most this much latency.
const HEARTBEAT: Duration = Duration::from_secs(1);

/// Tries once; with `waiting`, queues and sleeps until a hint says it is our turn, the holder's
/// lease ends (if we are next), the ticket needs renewing, or the wait ends (`deadline`, none:
/// forever); then tries again.
async fn acquire<L: LockService>(
    lock: &mut L,
    spec: &LockSpec,
    holder: &Holder,
    deadline: Option<Instant>,
    waiting: bool,
    signals: &mut Signals,
    started: Instant,
) -> Result<Lease, Failed> {
    let mut announced = false;
    loop {
        if let Some(sig) = signals.take_abort() {
            return Err(abort(lock, spec, holder, waiting, sig, started).await);
        }
        if waiting {
            // Before each attempt (a no-op while subscribed): a release between our attempt and
            // our sleep is not missed. A failure here is not the end of the wait: a queued CI
            // job must survive a Redis restart; the attempt below meets the same outage and
            // is retried until the wait ends (the heartbeat poll covers a missing subscription).
            match lock.subscribe_wakeups(spec).await {
                Ok(()) => {}
                // A refusal (no SUBSCRIBE, no &lockrun:wake:*, a wrong password) is a
                // configuration mistake: waiting does not fix it, and a waiter quietly
                // falling back to polling would hide it until the queue misbehaves.
                Err(e) if e.is_refusal() => {
                    leave(lock, spec, holder, None).await;
                    return Err(Failed::Code(unavailable(&e)));
                }
                Err(e) => debug!(error = %e, "no subscription to release hints yet"),
            }
        }
        // A stop signal ends lockrun at once, also while the attempt waits for an answer (a
        // server that accepts and never replies kept lockrun for the whole request timeout).
        let attempt = tokio::select! {
            attempt = lock.acquire(spec, holder, waiting) => attempt,
            sig = next_abort(signals) => {
                // The attempt may still land on the server: give back, token-checked, what
                // it may have taken, within a short bound (the key expires by its TTL if not).
                let cleanup = lock.give_back(spec, holder);
                let _ = tokio::time::timeout(Duration::from_secs(1), cleanup).await;
                return Err(abort(lock, spec, holder, waiting, sig, started).await);
            }
        };
        let remaining = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        let sleep = match attempt {
            Ok(Acquire::Acquired(lease)) => return Ok(lease),
            Ok(Acquire::Held {
                holder: other,
                pttl,
                rank,
            }) => {
                // Host, pid and start time only: the value's first word names the holder
                // for lockrun's own checks and has no business in a log.
                let holder_started = other.as_deref().and_then(crate::lock::holder_started);
                let other = other.as_deref().map_or("?", describe_holder);
                if remaining == Some(Duration::ZERO) {
                    if waiting {
                        // (Without waiting, the attempt itself recorded the skip.)
                        let note = note(Outcome::Skipped, None, started);
                        leave(lock, spec, holder, Some(&note)).await;
                    }
                    let left = pttl.map(|d| Human(d).to_string());
                    info!(key = %spec.key, holder = other, ttl_left = left.as_deref().unwrap_or("none"),
                          "redis lock already acquired");
                    return Err(Failed::Conflict(holder_started));
                }
                if !announced {
                    announced = true;
                    info!(key = %spec.key, holder = other, "redis lock already acquired; waiting");
                }
                let mut sleep = HEARTBEAT;
                if rank == Some(0) {
                    // Next in line: never sleep past the holder's lease end (plus a little
                    // jitter), so a holder that died without releasing is noticed then.
                    if let Some(p) = pttl {
                        sleep =
                            sleep.min(p + crate::lock::jitter(Duration::from_millis(5) + p / 100));
                    }
                }
                debug!(rank, sleep = %Human(sleep), "waiting for the lock");
                remaining.map_or(sleep, |r| sleep.min(r))
            }
            Err(e) if e.is_outage() && waiting && remaining != Some(Duration::ZERO) => {
                warn!(error = %e, "Redis unavailable while waiting for the lock; retrying");
                remaining.map_or(HEARTBEAT, |r| HEARTBEAT.min(r))
            }
            Err(e) => {
                // The attempt may have taken the lock (its reply lost, or a script that failed
                // after writing): give it back, token-checked, so nothing is left locked. Once:
                // an attempt that gave back what it knew it took leaves nothing to do here.
                let cleanup = lock.give_back(spec, holder);
                let _ = tokio::time::timeout(Duration::from_secs(1), cleanup).await;
                return Err(Failed::Code(unavailable(&e)));
            }
        };
        tokio::select! {
            () = lock.wait_for_turn(holder, sleep) => {}
            r = signals.recv() => {
                if signals::ABORTING.contains(&r.signo) {
                    return Err(abort(lock, spec, holder, waiting, r.signo, started).await);
                }
            }
        }
    }
}

/// The next stop signal (SIGTERM, SIGINT, SIGHUP, SIGQUIT); the others mean nothing before the
/// command starts.
async fn next_abort(signals: &mut Signals) -> i32 {
    loop {
        let r = signals.recv().await;
        if signals::ABORTING.contains(&r.signo) {
            return r.signo;
        }
    }
}

async fn abort<L: LockService>(
    lock: &mut L,
    spec: &LockSpec,
    holder: &Holder,
    waiting: bool,
    sig: i32,
    started: Instant,
) -> Failed {
    info!(signal = %signals::name(sig), "interrupted while waiting for the lock");
    if waiting {
        let note = note(Outcome::Aborted, Some(ExitCode::Aborted(sig)), started);
        leave(lock, spec, holder, Some(&note)).await;
    }
    Failed::Aborted(sig)
}

/// Best effort: a ticket left behind expires by itself within `TICKET`.
async fn leave<L: LockService>(
    lock: &mut L,
    spec: &LockSpec,
    holder: &Holder,
    note: Option<&Note>,
) {
    let leaving = lock.leave_queue(spec, holder, note);
    let _ = tokio::time::timeout(Duration::from_secs(1), leaving).await;
}

/// The history entry of a run that ends now.
fn note(outcome: Outcome, code: Option<ExitCode>, started: Instant) -> Note {
    Note {
        outcome,
        exit_code: code.map(ExitCode::code),
        duration: started.elapsed(),
    }
}

/// Token-checked release; a failure is logged, not fatal: the TTL frees the key.
async fn release<L: LockService>(
    lock: &mut L,
    spec: &LockSpec,
    lease: &Lease,
    keep: Duration,
    note: Option<&Note>,
) -> Released {
    debug!(key = %spec.key, "releasing redis lock");
    let mut result = lock.release(spec, lease, keep, note).await;
    let mut retried = false;
    // Two retries, each on a fresh connection: release is safe to repeat (token-checked). Two,
    // because a failover can close a new connection again: seen here after a Sentinel failover
    // on Valkey, where two attempts in a row met "broken pipe" and the key was left to expire.
    // The history entry goes along again: the first may not have been written (a reader of
    // the history drops an entry repeated by the same run).
    for _ in 0..2 {
        if !result.as_ref().is_err_and(LockError::is_outage) {
            break;
        }
        retried = true;
        result = lock.release(spec, lease, keep, note).await;
    }
    match result {
        // The first attempt's outcome was unknown; most likely it did delete the key and only
        // its reply was lost. Not a stolen lock: say what is known.
        Ok(Release::NotOwner) if retried => info!(key = %spec.key,
            "redis lock released (the first attempt's reply was lost; on retry the key was no longer ours: deleted by that attempt or expired)"),
        Ok(Release::Deleted) => info!(key = %spec.key, "redis lock released"),
        Ok(Release::Kept(d)) => {
            info!(key = %spec.key, kept_for = %Human(d), "redis lock released (key kept for the rest of the hold)")
        }
        // After a job: it ran without the lock for a while (`app::run` makes the run `lost`).
        Ok(Release::NotOwner) if note.is_some_and(|n| n.outcome == Outcome::Ran) => {
            error!(key = %spec.key, "redis lock lost: the key was gone or another holder's at release (expired, or deleted by release --force); the job ran without it for a while");
            return Released::Gone;
        }
        Ok(Release::NotOwner) => {
            warn!(key = %spec.key, "redis lock was no longer ours at release; nothing deleted")
        }
        Err(e) => {
            warn!(key = %spec.key, error = %e, "redis lock release failed; the key will expire by its TTL")
        }
    }
    Released::Done
}
