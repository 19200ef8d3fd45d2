//! The lockruns a scenario runs: stderr drained, or plugged on purpose.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// A child's stderr, collected line by line on a thread; waitable.
pub struct Log {
    lines: Mutex<Vec<String>>,
    closed: AtomicBool,
    changed: Condvar,
}

impl Log {
    pub(super) fn drain(stream: impl Read + Send + 'static) -> Arc<Log> {
        let log = Arc::new(Log {
            lines: Mutex::default(),
            closed: AtomicBool::new(false),
            changed: Condvar::new(),
        });
        let l = log.clone();
        thread::spawn(move || {
            let mut r = BufReader::new(stream);
            let mut buf = Vec::new();
            while matches!(r.read_until(b'\n', &mut buf), Ok(n) if n > 0) {
                let line = String::from_utf8_lossy(&buf).trim_end().to_string();
                buf.clear();
                // The filler that plugged an undrained pipe is not lockrun's.
                if !line.starts_with(FILLER) && !line.is_empty() {
                    l.lines.lock().unwrap().push(line);
                    l.changed.notify_all();
                }
            }
            l.closed.store(true, Ordering::SeqCst);
            l.changed.notify_all();
        });
        log
    }

    pub(super) fn empty() -> Arc<Log> {
        Arc::new(Log {
            lines: Mutex::default(),
            closed: AtomicBool::new(false),
            changed: Condvar::new(),
        })
    }

    /// Waits for a line containing `needle` at index `from` or later; returns its index.
    pub fn wait_for(&self, needle: &str, from: usize, limit: Duration) -> Option<usize> {
        let deadline = Instant::now() + limit;
        let mut lines = self.lines.lock().unwrap();
        loop {
            if let Some(i) = lines.iter().skip(from).position(|l| l.contains(needle)) {
                return Some(from + i);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || self.closed.load(Ordering::SeqCst) {
                return None;
            }
            lines = self.changed.wait_timeout(lines, left).unwrap().0;
        }
    }

    pub fn len(&self) -> usize {
        self.lines.lock().unwrap().len()
    }

    pub fn text(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    pub(super) fn wait_closed(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        let mut lines = self.lines.lock().unwrap();
        while !self.closed.load(Ordering::SeqCst) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            lines = self.changed.wait_timeout(lines, left).unwrap().0;
        }
    }
}

const FILLER: &str = "#chaos-filler#";

/// A running lockrun of a scenario: its stderr, and what [`Chaos::finish`] checks its exit
/// code against.
pub struct Running {
    pub child: Child,
    pub pid: u32,
    pub log: Arc<Log>,
    pub(super) label: String,
    pub(super) expected: Vec<i32>,
    /// The read end of a stderr pipe nobody reads yet (see [`Chaos::spawn_undrained`]).
    pub(super) undrained: Option<OwnedFd>,
}

impl Running {
    /// Fills the undrained stderr pipe to the brim, so lockrun's next log line blocks unless
    /// lockrun never lets logging block. Returns the bytes written.
    pub fn plug_stderr(&self) -> usize {
        let fd = self
            .undrained
            .as_ref()
            .expect("spawned with spawn_undrained");
        // A second open file description of the same pipe, non-blocking, for us alone:
        // O_NONBLOCK set on lockrun's own description would change what is under test.
        let path = format!("/proc/self/fd/{}", fd.as_raw_fd());
        let mut w = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&path)
            .unwrap_or_else(|e| panic!("reopen {path}: {e}"));
        // Whole lines (a write this small is atomic: all or EAGAIN), then single newlines for
        // the last bytes, so not even a short log line fits any more.
        let line = format!("{FILLER}{}\n", ".".repeat(200));
        let mut total = 0;
        for chunk in [line.as_bytes(), b"\n"] {
            loop {
                match w.write(chunk) {
                    Ok(n) => total += n,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) => panic!("filling stderr pipe: {e}"),
                }
            }
        }
        total
    }

    /// Starts reading an undrained stderr: lockrun can write again.
    pub fn drain_stderr(&mut self) {
        if let Some(fd) = self.undrained.take() {
            self.log = Log::drain(std::fs::File::from(fd));
        }
    }
}
