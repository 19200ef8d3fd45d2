//! The fenced resource and history recorder that fault-injection jobs talk to, and the jobs.
//!
//! A job is a `bash -c` script that opens `/dev/tcp/127.0.0.1/PORT` and sends one line per
//! event, waiting for a one-line reply each time:
//!
//! | message | reply | meaning |
//! |---|---|---|
//! | `begin <pid> <fence> <key>` | `ok` | the critical section starts |
//! | `write <pid> <fence>` | `ok` / `stale` | a write to the fenced resource |
//! | `end <pid>` | `ok` | the critical section ends |
//!
//! Waiting for the reply makes the timestamps causal: `end` is recorded before the job exits,
//! so before lockrun releases, so before the next holder's `begin` can even be sent. Every
//! timestamp is taken under one mutex from one monotonic clock (`Instant`), so the order of the
//! history is the order the recorder saw.
//!
//! A job killed before `end` stays live until its process is gone: each `begin` opens a pidfd
//! for the job, and a watcher thread (epoll) timestamps the moment it becomes readable.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

/// How a key is locked: the overlap and fence rules differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Exclusive,
    /// `--limit N`: up to N holders at once.
    Limit(usize),
}

/// One job's critical section as the recorder saw it.
#[derive(Clone, Debug)]
pub struct Section {
    pub pid: i32,
    /// The job's parent when it began: the lockrun that ran it.
    pub lockrun: i32,
    pub key: String,
    pub fence: u64,
    pub begin: Instant,
    pub end: Option<Instant>,
    /// When the job's process was seen gone (pidfd readable).
    pub death: Option<Instant>,
    pub writes: u32,
    pub stale: u32,
}

impl Section {
    /// The section is over at its `end`, or when the job died without one.
    pub fn gone(&self) -> Option<Instant> {
        match (self.end, self.death) {
            (Some(e), Some(d)) => Some(e.min(d)),
            (e, d) => e.or(d),
        }
    }

    pub fn live_at(&self, t: Instant) -> bool {
        self.begin <= t && self.gone().is_none_or(|g| g > t)
    }
}

#[derive(Default)]
struct State {
    sections: Vec<Section>,
    by_pid: HashMap<i32, usize>,
    modes: HashMap<String, Mode>,
    /// The resource: highest fence accepted per key.
    highest: HashMap<String, u64>,
    /// Pidfds of jobs not yet seen gone; closed only by the watcher.
    pidfds: HashMap<i32, OwnedFd>,
    /// Messages that did not follow the protocol (a job bug or a corrupted environment).
    errors: Vec<String>,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
    epoll: OwnedFd,
    stop: AtomicBool,
}

pub struct Recorder {
    pub port: u16,
    shared: Arc<Shared>,
    threads: Vec<thread::JoinHandle<()>>,
}

impl Recorder {
    pub fn start() -> Recorder {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the recorder");
        let port = listener.local_addr().unwrap().port();
        // SAFETY: epoll_create1 returns a new descriptor or -1.
        let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        assert!(
            ep >= 0,
            "epoll_create1: {}",
            std::io::Error::last_os_error()
        );
        let shared = Arc::new(Shared {
            state: Mutex::default(),
            changed: Condvar::new(),
            // SAFETY: a fresh descriptor nobody else owns.
            epoll: unsafe { OwnedFd::from_raw_fd(ep) },
            stop: AtomicBool::new(false),
        });
        let accept = {
            let shared = shared.clone();
            thread::spawn(move || {
                for stream in listener.incoming() {
                    if shared.stop.load(Ordering::SeqCst) {
                        break;
                    }
                    if let Ok(stream) = stream {
                        let shared = shared.clone();
                        thread::spawn(move || serve(stream, &shared));
                    }
                }
            })
        };
        let watcher = {
            let shared = shared.clone();
            thread::spawn(move || watch_deaths(&shared))
        };
        Recorder {
            port,
            shared,
            threads: vec![accept, watcher],
        }
    }

    /// Declares how `key` is locked (before any job uses it).
    pub fn key(&self, key: &str, mode: Mode) {
        self.lock().modes.insert(key.to_string(), mode);
    }

    pub fn mode(&self, key: &str) -> Mode {
        self.lock()
            .modes
            .get(key)
            .copied()
            .unwrap_or(Mode::Exclusive)
    }

    pub fn sections(&self) -> Vec<Section> {
        self.lock().sections.clone()
    }

    pub fn errors(&self) -> Vec<String> {
        self.lock().errors.clone()
    }

    /// Waits (on the recorder's own events, no polling) until `cond` holds for the history, or
    /// `limit` passes; says which.
    pub fn wait_until(&self, limit: Duration, cond: impl Fn(&[Section]) -> bool) -> bool {
        let deadline = Instant::now() + limit;
        let mut st = self.lock();
        loop {
            if cond(&st.sections) {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            // Deaths are signalled too, so waking on every change is enough.
            st = self.shared.changed.wait_timeout(st, left).unwrap().0;
        }
    }

    /// Waits until every section is over (ended, or its job gone); returns the pids of jobs
    /// still running after `limit`.
    pub fn settle(&self, limit: Duration) -> Vec<i32> {
        self.wait_until(limit, |s| s.iter().all(|s| s.gone().is_some()));
        let st = self.lock();
        st.sections
            .iter()
            .filter(|s| s.gone().is_none())
            .map(|s| s.pid)
            .collect()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.shared.state.lock().unwrap()
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn serve(stream: TcpStream, shared: &Shared) {
    let Ok(read) = stream.try_clone() else { return };
    let mut reply_to = stream;
    for line in BufReader::new(read).lines() {
        let Ok(line) = line else { break };
        let reply = handle(shared, &line);
        shared.changed.notify_all();
        if writeln!(reply_to, "{reply}").is_err() {
            break;
        }
    }
}

fn handle(shared: &Shared, line: &str) -> &'static str {
    let mut st = shared.state.lock().unwrap();
    let words: Vec<&str> = line.split_whitespace().collect();
    let num = |i: usize| words.get(i).and_then(|w| w.parse::<u64>().ok());
    match (words.first().copied(), num(1), num(2)) {
        (Some("begin"), Some(pid), Some(fence)) if words.len() == 4 => {
            let pid = pid as i32;
            let key = words[3].to_string();
            // A predecessor that already died may not have been timestamped by the watcher
            // yet: look now, so its death is recorded as before this begin, as it was.
            let now = Instant::now();
            let st = &mut *st;
            for s in st.sections.iter_mut() {
                if s.key == key && s.gone().is_none() {
                    if let Some(fd) = st.pidfds.get(&s.pid) {
                        if readable(fd.as_raw_fd()) {
                            s.death = Some(now);
                        }
                    }
                }
            }
            let begin = Instant::now();
            let mut section = Section {
                pid,
                lockrun: parent_of(pid).unwrap_or(0),
                key,
                fence,
                begin,
                end: None,
                death: None,
                writes: 0,
                stale: 0,
            };
            match pidfd_open(pid) {
                Some(fd) => {
                    let mut ev = libc::epoll_event {
                        events: libc::EPOLLIN as u32,
                        u64: pid as u64,
                    };
                    // SAFETY: both descriptors are open; ev outlives the call.
                    let rc = unsafe {
                        libc::epoll_ctl(
                            shared.epoll.as_raw_fd(),
                            libc::EPOLL_CTL_ADD,
                            fd.as_raw_fd(),
                            &mut ev,
                        )
                    };
                    assert_eq!(rc, 0, "epoll_ctl: {}", std::io::Error::last_os_error());
                    st.pidfds.insert(pid, fd);
                }
                // Gone already (killed right after sending): dead as of now.
                None => section.death = Some(begin),
            }
            st.by_pid.insert(pid, st.sections.len());
            st.sections.push(section);
            "ok"
        }
        (Some("write"), Some(pid), Some(fence)) if words.len() == 3 => {
            let Some(&i) = st.by_pid.get(&(pid as i32)) else {
                st.errors.push(format!("write before begin: {line}"));
                return "error";
            };
            let key = st.sections[i].key.clone();
            if st.sections[i].fence != fence {
                st.errors
                    .push(format!("write with another fence than its begin: {line}"));
            }
            st.sections[i].writes += 1;
            // A semaphore's holders write side by side with different fences: the resource
            // only guards exclusive keys.
            if st.modes.get(&key).copied().unwrap_or(Mode::Exclusive) != Mode::Exclusive {
                return "ok";
            }
            let highest = st.highest.entry(key).or_insert(0);
            if fence < *highest {
                st.sections[i].stale += 1;
                "stale"
            } else {
                *highest = fence;
                "ok"
            }
        }
        (Some("end"), Some(pid), None) if words.len() == 2 => {
            let now = Instant::now();
            match st.by_pid.get(&(pid as i32)) {
                Some(&i) => {
                    st.sections[i].end.get_or_insert(now);
                    "ok"
                }
                None => {
                    st.errors.push(format!("end before begin: {line}"));
                    "error"
                }
            }
        }
        _ => {
            st.errors.push(format!("bad message: {line:?}"));
            "error"
        }
    }
}

/// The watcher: timestamps each job's exit the moment its pidfd becomes readable.
fn watch_deaths(shared: &Shared) {
    let mut events = [libc::epoll_event { events: 0, u64: 0 }; 32];
    while !shared.stop.load(Ordering::SeqCst) {
        // SAFETY: the buffer is valid for its length; the epoll descriptor is open.
        let n = unsafe {
            libc::epoll_wait(
                shared.epoll.as_raw_fd(),
                events.as_mut_ptr(),
                events.len() as i32,
                50,
            )
        };
        if n <= 0 {
            continue;
        }
        let now = Instant::now();
        let mut st = shared.state.lock().unwrap();
        for ev in &events[..n as usize] {
            let pid = ev.u64 as i32;
            if let Some(fd) = st.pidfds.remove(&pid) {
                // SAFETY: removing a registered, still-open descriptor.
                unsafe {
                    libc::epoll_ctl(
                        shared.epoll.as_raw_fd(),
                        libc::EPOLL_CTL_DEL,
                        fd.as_raw_fd(),
                        std::ptr::null_mut(),
                    );
                }
            }
            if let Some(&i) = st.by_pid.get(&pid) {
                st.sections[i].death.get_or_insert(now);
            }
        }
        drop(st);
        shared.changed.notify_all();
    }
}

fn pidfd_open(pid: i32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open(2) returns a new descriptor or -1; flags 0.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    // SAFETY: a fresh descriptor nobody else owns.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// A pidfd is readable once its process has exited.
fn readable(fd: RawFd) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, zero timeout.
    unsafe { libc::poll(&mut p, 1, 0) == 1 }
}

/// The parent pid from /proc/PID/stat ("pid (comm) state ppid ..."; comm may hold spaces).
pub fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// What a job does when it gets SIGTERM (from lockrun on lock loss, or the parent-death
/// signal).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnTerm {
    /// bash's default: die at once.
    Die,
    /// Slow shutdown: keep writing (every 50 ms) for this many ms, then `end` and exit 0.
    Slow(u64),
    /// `trap '' TERM`: only SIGKILL stops it.
    Ignore,
}

/// A job: begin; write; hold (with a write every `write_every` ms); write; end.
#[derive(Clone, Debug)]
pub struct Job {
    pub hold_ms: u64,
    pub write_every_ms: u64,
    pub on_term: OnTerm,
    /// Send the job's own stderr to /dev/null: for a lockrun whose stderr nobody reads, where
    /// a job's error message would block the job instead of lockrun.
    pub quiet: bool,
}

impl Job {
    pub fn hold(hold_ms: u64) -> Job {
        Job {
            hold_ms,
            write_every_ms: 100,
            on_term: OnTerm::Die,
            quiet: false,
        }
    }

    pub fn writing_every(mut self, ms: u64) -> Job {
        self.write_every_ms = ms.max(1);
        self
    }

    pub fn on_term(mut self, on_term: OnTerm) -> Job {
        self.on_term = on_term;
        self
    }

    pub fn quiet(mut self) -> Job {
        self.quiet = true;
        self
    }

    /// The bash script. Exit codes 90/91 mean the recorder could not be reached: never in a
    /// scenario's expected set, so they surface as violations.
    pub fn script(&self, port: u16) -> String {
        let mut s = String::new();
        if self.quiet {
            s.push_str("exec 2>/dev/null\n");
        }
        s.push_str(&format!(
            "exec 3<>/dev/tcp/127.0.0.1/{port} || exit 90\n\
             say() {{ echo \"$*\" >&3 && read -r _ <&3 || exit 91; }}\n\
             w() {{ say write $$ \"$LOCKRUN_FENCE\"; }}\n\
             # Sleep in the background and wait: a trapped signal interrupts `wait` at once,\n\
             # where a foreground sleep would delay the trap until it finished.\n\
             nap() {{ sleep \"$1\" & wait $!; }}\n"
        ));
        match self.on_term {
            OnTerm::Die => {}
            OnTerm::Ignore => s.push_str("trap '' TERM\n"),
            OnTerm::Slow(ms) => s.push_str(&format!(
                "trap 'i=0; while [ $i -lt {n} ]; do w; nap 0.05; i=$((i+1)); done; say end $$; exit 0' TERM\n",
                n = ms.div_ceil(50)
            )),
        }
        s.push_str("say begin $$ \"$LOCKRUN_FENCE\" \"$LOCKRUN_KEY\"\nw\n");
        let slices = (self.hold_ms / self.write_every_ms).max(1);
        let slice = self.hold_ms / slices;
        for i in 0..slices {
            // The last slice takes the remainder so the hold is exact.
            let ms = if i + 1 == slices {
                self.hold_ms - slice * (slices - 1)
            } else {
                slice
            };
            s.push_str(&format!("nap {}.{:03}; w\n", ms / 1000, ms % 1000));
        }
        s.push_str("say end $$\n");
        s
    }
}
