//! Log lines where stderr is the journal: systemd sets `JOURNAL_STREAM=<dev>:<ino>` for a unit
//! whose output goes to journald, and lockrun starts each line with its sd-daemon(3) priority
//! (`<3>` error, `<4>` warning, `<6>` info, `<7>` debug and trace), which journald strips and
//! stores, so `journalctl -p warning` finds warnings and errors. Only when fd 2 really is that
//! stream (its st_dev:st_ino): the variable is inherited by whatever the unit starts, also
//! where stderr goes elsewhere. Here the "journal" is a stream socket (what journald gives a
//! unit) or a file, whose device and inode the test puts in the variable; the rest of each line
//! is the line lockrun writes anywhere else.

use crate::support::*;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::Stdio;

/// Where a test's lockrun writes its stderr.
#[derive(Clone, Copy, Debug)]
enum Sink<'a> {
    /// One end of a stream socket; the test reads the other.
    Socket,
    /// A file, created empty.
    File(&'a Path),
}

/// Runs `cmd` with stderr on `sink`, JOURNAL_STREAM set to what `stream` makes of the sink's
/// own `<dev>:<ino>` (that, another value, or unset for `None`): the exit code and what lockrun
/// wrote to stderr.
fn run_on(
    sink: Sink,
    stream: impl Fn(&str) -> Option<String>,
    mut cmd: Lockrun,
) -> (Option<i32>, String) {
    let (fd, mut ours): (OwnedFd, Option<UnixStream>) = match sink {
        Sink::Socket => {
            let (ours, theirs) = UnixStream::pair().unwrap();
            (theirs.into(), Some(ours))
        }
        Sink::File(path) => (std::fs::File::create(path).unwrap().into(), None),
    };
    let st = nix::sys::stat::fstat(&fd).unwrap();
    if let Some(v) = stream(&format!("{}:{}", st.st_dev, st.st_ino)) {
        cmd.env("JOURNAL_STREAM", v);
    }
    cmd.stdout(Stdio::null()).stderr(Stdio::from(fd));
    let child = cmd.spawn().unwrap();
    // Our copy of the write end closes with the command, so the reader sees the end.
    drop(cmd);
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(s) = ours.as_mut() {
            s.read_to_string(&mut text).unwrap();
        }
        text
    });
    let code = wait_output(child).status.code();
    let text = match sink {
        Sink::Socket => reader.join().unwrap(),
        Sink::File(path) => std::fs::read_to_string(path).unwrap(),
    };
    (code, text)
}

/// What JOURNAL_STREAM says, given the stream's own `<dev>:<ino>`.
type Stream<'a> = dyn Fn(&str) -> Option<String> + 'a;

/// JOURNAL_STREAM as systemd sets it: the stream's own `<dev>:<ino>`.
fn itself(own: &str) -> Option<String> {
    Some(own.to_string())
}

/// A run that says something at every level: debug (-vv), info (the lock acquired),
/// error (the command not found), warning (the metrics file cannot be written).
fn every_level(redis: &Server) -> Lockrun {
    let mut cmd = Lockrun::on(redis);
    cmd.args([
        "-vv",
        "--metrics-file",
        "/nonexistent/dir/m.prom",
        "journal",
    ])
    .args(["--", "/nonexistent/command"]);
    cmd
}

/// The text line's level word (`<timestamp> <LEVEL> …`).
fn level_of(line: &str) -> &str {
    line.split_whitespace().nth(1).unwrap_or("")
}

fn priority_of(level: &str) -> &'static str {
    match level {
        "ERROR" => "<3>",
        "WARN" => "<4>",
        "INFO" => "<6>",
        "DEBUG" | "TRACE" => "<7>",
        other => panic!("not a level: {other}"),
    }
}

#[test]
fn journal_text_lines_start_with_their_priority_where_stderr_is_the_journal() {
    let redis = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("journal");
    for sink in [Sink::Socket, Sink::File(&file)] {
        let (code, text) = run_on(sink, itself, every_level(&redis));
        assert_eq!(code, Some(127), "{sink:?}: {text}");
        assert_every_level_prefixed(&text);
    }
}

/// Every line of `text` starts with its level's priority and is otherwise a text log line;
/// every level is there.
fn assert_every_level_prefixed(text: &str) {
    let mut levels = Vec::new();
    for line in text.lines() {
        let end = if line.starts_with('<') {
            line.find('>').map_or(0, |i| i + 1)
        } else {
            0
        };
        let (prefix, rest) = line.split_at(end);
        let level = level_of(rest);
        assert_eq!(prefix, priority_of(level), "{line}");
        // The rest is the line as anywhere else: `<UTC timestamp> <LEVEL> <message>`.
        assert!(
            rest.starts_with("20") && rest.split_whitespace().next().unwrap().ends_with('Z'),
            "{line}"
        );
        if !levels.contains(&level) {
            levels.push(level);
        }
    }
    for level in ["ERROR", "WARN", "INFO", "DEBUG"] {
        assert!(levels.contains(&level), "{level}: {text}");
    }
    for (prefix, message) in [
        ("<6>", "redis lock acquired, starting job"),
        ("<3>", "/nonexistent/command"),
        ("<4>", "cannot write metrics file /nonexistent/dir/m.prom"),
    ] {
        assert!(
            text.lines()
                .any(|l| l.starts_with(prefix) && l.contains(message)),
            "{prefix} {message}: {text}"
        );
    }
}

#[test]
fn journal_json_lines_start_with_their_priority_and_stay_json() {
    let redis = Server::start();
    let mut cmd = every_level(&redis);
    cmd.env("LOCKRUN_LOG_FORMAT", "json");
    let (code, text) = run_on(Sink::Socket, itself, cmd);
    assert_eq!(code, Some(127), "{text}");
    let mut levels = Vec::new();
    for line in text.lines() {
        let (prefix, rest) = line.split_at(line.find('{').unwrap_or(0));
        let v: serde_json::Value =
            serde_json::from_str(rest).unwrap_or_else(|e| panic!("{e}: {line}"));
        let level = v["level"].as_str().unwrap().to_string();
        assert_eq!(prefix, priority_of(&level), "{line}");
        levels.push(level);
    }
    for level in ["ERROR", "WARN", "INFO", "DEBUG"] {
        assert!(levels.iter().any(|l| l == level), "{level}: {text}");
    }
}

/// Errors found before logging is set up (a bad flag, a bad LOCKRUN_LOG) are errors too.
#[test]
fn journal_early_errors_are_priority_3() {
    for json in [false, true] {
        let mut cmd = Lockrun::bare();
        cmd.args(["--no-such-flag", "k", "--", "true"]);
        if json {
            cmd.env("LOCKRUN_LOG_FORMAT", "json");
        }
        let (code, text) = run_on(Sink::Socket, itself, cmd);
        assert_eq!(code, Some(64), "{text}");
        let line = text.strip_suffix('\n').unwrap_or(&text);
        assert!(!line.contains('\n'), "one line: {text}");
        let rest = line.strip_prefix("<3>").unwrap_or_else(|| panic!("{text}"));
        if json {
            let v: serde_json::Value = serde_json::from_str(rest).unwrap();
            assert_eq!(v["level"], "ERROR", "{text}");
        } else {
            assert_eq!(level_of(rest), "ERROR", "{text}");
        }
    }
}

/// stderr is not the stream JOURNAL_STREAM names (the variable inherited by a job whose stderr
/// goes to a file, a terminal, cron's mail), or the variable is not systemd's: no prefix, the
/// lines exactly as without the variable.
#[test]
fn journal_no_prefix_where_stderr_is_not_the_journal() {
    let redis = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("stderr");
    let journal = dir.path().join("the-journal");
    std::fs::write(&journal, "").unwrap();
    let m = std::fs::metadata(&journal).unwrap();
    let elsewhere = format!("{}:{}", m.dev(), m.ino());
    let says: [(&str, &Stream); 7] = [
        ("another file's", &|_| Some(elsewhere.clone())),
        ("the inode after", &|own| {
            let (dev, ino) = own.split_once(':').unwrap();
            Some(format!("{dev}:{}", ino.parse::<u64>().unwrap() + 1))
        }),
        ("no inode", &|own| {
            Some(own.split(':').next().unwrap().into())
        }),
        ("a trailing word", &|own| Some(format!("{own}x"))),
        ("a space", &|own| Some(format!(" {own}"))),
        ("empty", &|_| Some(String::new())),
        ("unset", &|_| None),
    ];
    for sink in [Sink::Socket, Sink::File(&file)] {
        for (what, stream) in &says {
            let (code, text) = run_on(sink, stream, every_level(&redis));
            assert_eq!(code, Some(127), "{what}, {sink:?}: {text}");
            assert!(text.lines().count() > 3, "{what}, {sink:?}: {text}");
            for line in text.lines() {
                assert!(line.starts_with("20"), "{what}, {sink:?}: {line}");
                priority_of(level_of(line));
            }
        }
    }
}
