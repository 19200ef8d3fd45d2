//! The shipped examples stopped the way their platform stops them, with a job that ignores
//! SIGTERM: the Kubernetes CronJob (lockrun as PID 1 of a PID namespace), the Deployment and
//! the compose service (tick.sh as PID 1, lockrun under it), the systemd unit (`KillMode=mixed`:
//! SIGTERM to lockrun alone) and installing.md's `docker run` lines (lockrun as PID 1). Each
//! must be gone within the platform's grace (`terminationGracePeriodSeconds`,
//! `stop_grace_period`, `TimeoutStopSec`, `--stop-timeout`), read from the shipped file, with the
//! key released, the run recorded (`aborted`) and the job's end as exit code: the platform's own
//! SIGKILL never has to come. Kubernetes, Docker and systemd cannot run here: what they do on
//! stop is one signal, then a deadline, which these tests do, to the command lines and settings
//! the files ship. A `docker run --init` line (an init as PID 1, lockrun its child) must keep
//! the lock for what the job daemonizes, as `--subreaper` does.

use crate::support::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn packaging(file: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("packaging")
        .join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The first value after `name:` in a manifest (`terminationGracePeriodSeconds: 60   # …`).
fn yaml_value<'a>(text: &'a str, name: &str) -> &'a str {
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("{name}:")))
        .unwrap_or_else(|| panic!("no {name} in the manifest"));
    let value = line.split_once(':').unwrap().1;
    value.split('#').next().unwrap().trim().trim_matches('"')
}

/// An env entry's value: `{ name: N, value: V }` on one line, or `- name: N` then `value: V`.
fn env_value(text: &str, name: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    for (i, l) in lines.iter().enumerate() {
        if l.contains(&format!("name: {name},")) {
            let v = l.split("value:").nth(1).unwrap().split('#').next().unwrap();
            return v
                .trim()
                .trim_end_matches('}')
                .trim()
                .trim_matches('"')
                .to_string();
        }
        if l.trim() == format!("- name: {name}") {
            return yaml_value(lines[i + 1], "value").to_string();
        }
    }
    panic!("no env {name} in the manifest")
}

fn seconds(s: &str) -> Duration {
    let n: u64 = s
        .trim_end_matches('s')
        .parse()
        .unwrap_or_else(|_| panic!("seconds: {s}"));
    Duration::from_secs(n)
}

/// A directory with `job` (ignores SIGTERM, prints nothing, runs 120 s) and `lockrun` (a link to
/// the binary under test), as the image's /usr/local/bin would have them.
fn bin_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let job = dir.path().join("job.sh");
    std::fs::write(&job, "#!/bin/sh\ntrap '' TERM\nsleep 120\n").unwrap();
    let mut perms = std::fs::metadata(&job).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&job, perms).unwrap();
    std::os::unix::fs::symlink(lockrun_bin(), dir.path().join("lockrun")).unwrap();
    dir
}

/// The first child of `pid` (unshare's child: PID 1 of the namespace), once it exists.
fn first_child(pid: u32) -> u32 {
    let mut kid = None;
    eventually("unshare's child", || {
        kid = descendants(pid).first().copied();
        kid.is_some()
    });
    kid.unwrap()
}

/// Waits for `key` to be held (the job runs), sends SIGTERM to `target` as the platform does,
/// and returns how long until `child` exited, with its status and stderr.
fn stop(
    child: &mut std::process::Child,
    redis: &Server,
    key: &str,
    target: u32,
) -> (Duration, Option<i32>, String) {
    eventually("the job to run under the lock", || redis.exists(key));
    std::thread::sleep(Duration::from_millis(500));
    let sent = Instant::now();
    kill(target, libc::SIGTERM);
    let status = wait_timeout(child, Duration::from_secs(120)).expect("stops");
    let took = sent.elapsed();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    (took, status.code(), err)
}

/// The run is recorded as `aborted` with the job's end (137), and the key is released, or, with
/// `--every` (`hold`), kept only for the rest of the tick's hold: the job did start, and the
/// tick stays taken, as for a job that ended by itself.
fn assert_recorded(metrics: &Path, redis: &Server, key: &str, what: &str, hold: Option<Duration>) {
    let pttl: i64 = redis.cmd(&["PTTL", key]);
    match hold {
        None => assert_eq!(pttl, -2, "{what}: the key was released"),
        Some(h) => assert!(
            pttl == -2 || (pttl > 0 && pttl <= h.as_millis() as i64),
            "{what}: the key kept for the rest of the hold at most: PTTL {pttl}"
        ),
    }
    let mut history = Lockrun::bare();
    history
        .args(["history", "--json", "-r"])
        .arg(redis.url())
        .arg(key);
    let out = run(history);
    let runs: serde_json::Value = serde_json::from_str(&stdout_of(&out)).unwrap();
    assert_eq!(runs[0]["outcome"], "aborted", "{what}: the history: {runs}");
    assert_eq!(runs[0]["exit_code"], 137, "{what}: the history: {runs}");
    let text = std::fs::read_to_string(metrics).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(text.contains("outcome=\"aborted\"} 1"), "{what}: {text}");
    assert!(
        text.contains("lockrun_last_run_exit_code{key=\"") && text.contains("} 137"),
        "{what}: {text}"
    );
}

#[test]
fn platform_stops_the_cronjob_within_its_grace() {
    let manifest = packaging("kubernetes/cronjob.yaml");
    let grace = seconds(yaml_value(&manifest, "terminationGracePeriodSeconds"));
    let kill_after = env_value(&manifest, "LOCKRUN_KILL_AFTER");
    let command: Vec<String> = serde_json::from_str(yaml_value(&manifest, "command")).unwrap();
    let redis = Server::start();
    let bin = bin_dir();
    let metrics: PathBuf = bin.path().join("job.prom");
    // The container's command, its image's script replaced by the SIGTERM-ignoring job.
    let args: Vec<String> = command[1..]
        .iter()
        .map(|a| {
            if a == "/app/report.sh" {
                bin.path().join("job.sh").display().to_string()
            } else {
                a.clone()
            }
        })
        .collect();
    let key = args
        .iter()
        .find(|a| !a.starts_with('-') && !a.contains('/'))
        .unwrap()
        .clone();
    let mut cmd = in_a_pid_namespace(&[]);
    cmd.arg(lockrun_bin())
        .args(&args)
        .env("LOCKRUN_REDIS_URL", redis.url())
        .env("LOCKRUN_KILL_AFTER", &kill_after)
        .env(
            "LOCKRUN_CONFLICT_EXIT_CODE",
            env_value(&manifest, "LOCKRUN_CONFLICT_EXIT_CODE"),
        )
        .env(
            "LOCKRUN_LOG_FORMAT",
            env_value(&manifest, "LOCKRUN_LOG_FORMAT"),
        )
        .env("LOCKRUN_METRICS_FILE", &metrics)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let pid1 = first_child(child.id());
    let (took, code, err) = stop(&mut child, &redis, &key, pid1);
    assert!(
        took < grace,
        "gone in {took:?}, within terminationGracePeriodSeconds {grace:?}: {err}"
    );
    assert!(
        took >= seconds(&kill_after) - Duration::from_millis(200),
        "after --kill-after: {took:?}"
    );
    assert_eq!(code, Some(137), "{err}");
    assert_recorded(&metrics, &redis, &key, "CronJob", None);
}

#[test]
fn platform_stops_the_deployment_within_its_grace() {
    let manifest = packaging("kubernetes/deployment.yaml");
    let grace = seconds(yaml_value(&manifest, "terminationGracePeriodSeconds"));
    let kill_after = env_value(&manifest, "LOCKRUN_KILL_AFTER");
    let key = env_value(&manifest, "LOCKRUN_KEY_NAME");
    let redis = Server::start();
    let bin = bin_dir();
    let metrics = bin.path().join("job.prom");
    let tick = Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/compose/tick.sh");
    // tick.sh as PID 1, with the image's /usr/local/bin (lockrun, job.sh) bound over the host's
    // in a private mount namespace. TICK_SECONDS 2 instead of the manifest's 60: the stop does
    // not depend on it, and the test need not wait a minute for a tick.
    let script = format!(
        "mount -n --bind '{}' /usr/local/bin && exec /bin/sh '{}'",
        bin.path().display(),
        tick.display()
    );
    let mut cmd = Command::new("unshare");
    from_a_clean_caller(&mut cmd);
    cmd.args([
        "--mount",
        "--propagation",
        "private",
        "--pid",
        "--fork",
        "--mount-proc",
        "--kill-child",
    ])
    .args(["sh", "-c", &script])
    .env("LOCKRUN_REDIS_URL", redis.url())
    .env("LOCKRUN_KILL_AFTER", &kill_after)
    .env("LOCKRUN_KEY_NAME", &key)
    .env("LOCKRUN_METRICS_FILE", &metrics)
    .env("TICK_SECONDS", "2")
    .env(
        "PATH",
        format!(
            "/usr/local/bin:{}",
            std::env::var("PATH").unwrap_or_default()
        ),
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let pid1 = first_child(child.id());
    let (took, code, err) = stop(&mut child, &redis, &key, pid1);
    let mut out = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut out).unwrap();
    assert!(
        took < grace,
        "gone in {took:?}, within terminationGracePeriodSeconds {grace:?}: {out}{err}"
    );
    // The compose service runs the same tick.sh, stopped by `docker stop`.
    let compose = seconds(yaml_value(
        &packaging("compose/docker-compose.yml"),
        "stop_grace_period",
    ));
    assert!(
        took < compose,
        "gone in {took:?}, within compose's stop_grace_period {compose:?}: {out}{err}"
    );
    assert!(
        took >= seconds(&kill_after) - Duration::from_millis(200),
        "after --kill-after: {took:?}"
    );
    // tick.sh reports lockrun's code and exits 143 itself.
    assert!(out.contains("tick: lockrun exit=137"), "{out}{err}");
    assert_eq!(code, Some(143), "{out}{err}");
    // tick.sh's --every 2s: the key is kept for the rest of its 1 s hold at most.
    assert_recorded(
        &metrics,
        &redis,
        &key,
        "Deployment",
        Some(Duration::from_secs(1)),
    );
}

#[test]
fn platform_stops_the_systemd_unit_within_its_timeout() {
    let unit = packaging("systemd/lockrun-example.service");
    let setting = |name: &str| -> String {
        unit.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("no {name}= in the unit"))
            .to_string()
    };
    assert_eq!(setting("KillMode"), "mixed", "SIGTERM to lockrun alone");
    let timeout = seconds(&setting("TimeoutStopSec"));
    let exec: Vec<String> = setting("ExecStart")
        .split_whitespace()
        .map(String::from)
        .collect();
    assert_eq!(exec[0], "/usr/bin/lockrun");
    let redis = Server::start();
    let bin = bin_dir();
    let metrics = bin.path().join("job.prom");
    let args: Vec<String> = exec[1..]
        .iter()
        .map(|a| {
            if a == "/usr/local/bin/job" {
                bin.path().join("job.sh").display().to_string()
            } else {
                a.clone()
            }
        })
        .collect();
    let key = args[args.iter().position(|a| a == "--").unwrap() - 1].clone();
    let mut cmd = Lockrun::bare();
    cmd.args(&args)
        .env("LOCKRUN_REDIS_URL", redis.url())
        .env("LOCKRUN_METRICS_FILE", &metrics)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let pid = child.id();
    let (took, code, err) = stop(&mut child, &redis, &key, pid);
    assert!(
        took < timeout,
        "gone in {took:?}, within TimeoutStopSec {timeout:?}: {err}"
    );
    assert!(
        took >= Duration::from_millis(9800),
        "after --kill-after (10 s): {took:?}"
    );
    assert_eq!(code, Some(137), "{err}");
    // The unit's --every 1m: 54 s of hold from the acquire.
    assert_recorded(
        &metrics,
        &redis,
        &key,
        "systemd",
        Some(Duration::from_secs(54)),
    );
}

/// The `docker run` lines of docs/installing.md that run the lockrun image: each one's Docker
/// options (`--init`, the `--stop-timeout` grace) and the arguments the image's entrypoint
/// (lockrun) gets.
struct DockerRun {
    line: String,
    init: bool,
    /// `--stop-timeout`, else Docker's default, 10 s.
    grace: Duration,
    lockrun_args: Vec<String>,
}

fn docker_run_lines() -> Vec<DockerRun> {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/installing.md"))
            .unwrap();
    let mut runs = Vec::new();
    for line in doc.lines().filter(|l| l.starts_with("docker run ")) {
        let mut words = line.split_whitespace().skip(2);
        let (mut init, mut grace) = (false, Duration::from_secs(10));
        let mut image = None;
        while let Some(w) = words.next() {
            match w {
                "--init" => init = true,
                "--stop-timeout" => grace = seconds(words.next().unwrap()),
                "-e" | "--env" | "--name" | "--network" | "-v" => {
                    words.next();
                }
                w if w.starts_with('-') => {}
                w => {
                    image = Some(w);
                    break;
                }
            }
        }
        if image == Some("lockrun") {
            runs.push(DockerRun {
                line: line.to_string(),
                init,
                grace,
                lockrun_args: words.map(String::from).collect(),
            });
        }
    }
    assert!(
        !runs.is_empty(),
        "no `docker run … lockrun` line in docs/installing.md"
    );
    runs
}

/// The line's lockrun arguments with the command after `--` replaced by `job`.
fn with_job(args: &[String], job: &[&str]) -> Vec<String> {
    let dash = args.iter().position(|a| a == "--").expect("KEY -- COMMAND");
    let mut out = args[..=dash].to_vec();
    out.extend(job.iter().map(|s| s.to_string()));
    out
}

/// `docker stop` is SIGTERM to PID 1, then SIGKILL after the container's stop timeout: with
/// Docker's default (10 s, `--kill-after`'s too) lockrun would be killed before it released.
#[test]
fn platform_stops_the_docker_run_lines_within_their_stop_timeout() {
    for docker in docker_run_lines().iter().filter(|d| !d.init) {
        let redis = Server::start();
        let bin = bin_dir();
        let job = bin.path().join("job.sh").display().to_string();
        let args = with_job(&docker.lockrun_args, &[&job]);
        let key = args[args.iter().position(|a| a == "--").unwrap() - 1].clone();
        let metrics = bin.path().join("job.prom");
        let mut cmd = in_a_pid_namespace(&[]);
        cmd.arg(lockrun_bin())
            .args(&args)
            .env("LOCKRUN_REDIS_URL", redis.url())
            .env("LOCKRUN_METRICS_FILE", &metrics)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        let pid1 = first_child(child.id());
        let (took, code, err) = stop(&mut child, &redis, &key, pid1);
        assert!(
            took < docker.grace,
            "gone in {took:?}, within the container's stop timeout {:?} ({}): {err}",
            docker.grace,
            docker.line
        );
        assert_eq!(code, Some(137), "{err}");
        assert_recorded(&metrics, &redis, &key, "docker run", None);
    }
}

/// `unshare` starting `init` (its words) as PID 1 of a PID namespace of its own, with its own
/// /proc, killed with the test; lockrun (the words the caller adds) is PID 1 itself when `init`
/// is empty. Started from a clean caller, as a container runtime starts its entrypoint.
fn in_a_pid_namespace(init: &[&std::ffi::OsStr]) -> Command {
    let mut cmd = Command::new("unshare");
    from_a_clean_caller(&mut cmd);
    cmd.args(["--pid", "--fork", "--mount-proc", "--kill-child"])
        .args(init);
    cmd
}

/// tini, from PATH (tests/ensure-inits.sh installs it).
fn tini() -> std::path::PathBuf {
    let found = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|d| d.join("tini"))
        .find(|p| p.is_file());
    found.expect("tini is not installed: bash tests/ensure-inits.sh installs it")
}

/// Under an init (`docker run --init`: tini as PID 1), lockrun is a child: only with
/// `--subreaper` does a process the job daemonizes stay lockrun's, held under the lock until it
/// is gone. The control, the same line without it, releases while that process still runs.
#[test]
fn docker_run_with_init_lines_keep_the_lock_for_a_daemonized_process() {
    let inits: Vec<DockerRun> = docker_run_lines().into_iter().filter(|d| d.init).collect();
    assert!(
        !inits.is_empty(),
        "no `docker run --init … lockrun` line in docs/installing.md"
    );
    for docker in &inits {
        for control in [false, true] {
            let redis = Server::start();
            let dir = tempfile::tempdir().unwrap();
            let done = dir.path().join("daemon.done");
            // It ignores the SIGTERM lockrun sends what the command left behind, and the command
            // exits once it does (not before: the SIGTERM would find it without its trap).
            let ready = dir.path().join("daemon.ready");
            let daemon = format!(
                "setsid sh -c 'trap \"\" TERM; touch {ready}; sleep 2; touch {done}' \
                 </dev/null >/dev/null 2>&1 & while [ ! -e {ready} ]; do sleep 0.01; done",
                ready = ready.display(),
                done = done.display()
            );
            let mut args = with_job(&docker.lockrun_args, &["sh", "-c", &daemon]);
            if control {
                args.retain(|a| a != "--subreaper");
            } else {
                assert!(
                    args.iter().any(|a| a == "--subreaper"),
                    "under --init lockrun is not PID 1: the line needs --subreaper: {}",
                    docker.line
                );
            }
            let key = args[args.iter().position(|a| a == "--").unwrap() - 1].clone();
            // Debian's tini, the init `docker run --init` starts: PID 1 of the namespace,
            // lockrun its child.
            let tini = tini();
            let mut cmd = in_a_pid_namespace(&[tini.as_os_str(), "--".as_ref()]);
            cmd.arg(lockrun_bin())
                .args(&args)
                .env("LOCKRUN_REDIS_URL", redis.url())
                .stdout(Stdio::null())
                .stderr(Stdio::piped());
            let mut child = cmd.spawn().unwrap();
            eventually("lockrun to release the lock", || {
                redis.exists(&key) || wait_timeout(&mut child, Duration::ZERO).is_some()
            });
            eventually("the key to go", || !redis.exists(&key));
            let daemon_done_at_release = done.exists();
            let status = wait_timeout(&mut child, Duration::from_secs(20)).expect("exits");
            assert_eq!(status.code(), Some(0));
            if control {
                assert!(
                    !daemon_done_at_release,
                    "the control (no --subreaper) released while the daemon ran"
                );
            } else {
                assert!(
                    daemon_done_at_release,
                    "the lock was released before the daemonized process ended: {}",
                    docker.line
                );
            }
        }
    }
}
