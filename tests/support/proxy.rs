//! A fault-injecting TCP proxy: one lockrun's network path to its Redis server.
//!
//! Each accepted connection is forwarded to the upstream server by four threads: per direction
//! a reader that stamps every chunk with the moment it may be delivered, and a writer that
//! delivers chunks in arrival order at those moments. Splitting reader and writer is what lets a
//! delay hold bytes back without blocking the other direction or reordering anything; the
//! end-of-stream travels through the same queue, so a close never overtakes delayed data (as
//! on a real network, where the FIN follows the data).
//!
//! Faults are read at both ends of the queue: a chunk read under a delay waits that long, and a
//! chunk still in flight when its direction starts dropping is lost, like packets already on
//! the wire when a partition begins.

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    None,
    /// Server→client bytes are each held back this long (order kept).
    DelayReplies(Duration),
    /// Client→server bytes are each held back this long (order kept).
    DelayRequests(Duration),
    /// Server→client bytes are silently discarded; the connection stays open.
    DropReplies,
    /// Client→server bytes are silently discarded; the connection stays open.
    DropRequests,
    /// Both directions discarded: a partition. New connections are still accepted (the kernel
    /// completes the handshake on its own) and then hang, which is what a client sees when a
    /// middlebox eats its packets.
    BlackHole,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dir {
    Requests,
    Replies,
}

impl Fault {
    fn drops(self, dir: Dir) -> bool {
        match self {
            Fault::BlackHole => true,
            Fault::DropReplies => dir == Dir::Replies,
            Fault::DropRequests => dir == Dir::Requests,
            _ => false,
        }
    }

    fn delay(self, dir: Dir) -> Duration {
        match (self, dir) {
            (Fault::DelayReplies(d), Dir::Replies) | (Fault::DelayRequests(d), Dir::Requests) => d,
            _ => Duration::ZERO,
        }
    }
}

pub struct Proxy {
    pub port: u16,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

struct Shared {
    fault: Mutex<Fault>,
    conns: Mutex<HashMap<u64, Arc<Conn>>>,
    total: AtomicUsize,
    /// Requests sent after the previous reply (or first) on their connection: round trips.
    round_trips: AtomicUsize,
    stopping: AtomicBool,
    /// Every connection thread, joined on drop so a test never leaves one behind.
    threads: Mutex<Vec<JoinHandle<()>>>,
}

/// One proxied connection: the socket to the client and the one to the server.
struct Conn {
    client: TcpStream,
    server: TcpStream,
    closed: Mutex<bool>,
    /// Wakes writers sleeping on a delayed chunk when the connection is torn down.
    wake: Condvar,
    /// Threads of this connection still running; the last one out unregisters it.
    live: AtomicUsize,
    /// Requests have been read since the last reply: more request bytes are the same round
    /// trip (a pipeline), reply bytes end it.
    asking: AtomicBool,
}

/// What travels through a direction's queue: bytes, or `None` for end-of-stream.
type Chunk = (Instant, Option<Vec<u8>>);

impl Proxy {
    /// Listens on 127.0.0.1:<free port>; forwards each accepted connection to `upstream`.
    pub fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("proxy: bind");
        let port = listener.local_addr().expect("proxy: local addr").port();
        let shared = Arc::new(Shared {
            fault: Mutex::new(Fault::None),
            conns: Mutex::new(HashMap::new()),
            total: AtomicUsize::new(0),
            round_trips: AtomicUsize::new(0),
            stopping: AtomicBool::new(false),
            threads: Mutex::new(Vec::new()),
        });
        let s = shared.clone();
        let acceptor = thread::Builder::new()
            .name("proxy-accept".into())
            .spawn(move || accept_loop(&s, &listener, upstream))
            .expect("proxy: spawn acceptor");
        Proxy {
            port,
            shared,
            acceptor: Some(acceptor),
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Applies from now on to existing AND new connections (and to bytes still queued).
    pub fn set(&self, fault: Fault) {
        *lock(&self.shared.fault) = fault;
    }

    pub fn connections_open(&self) -> usize {
        lock(&self.shared.conns).len()
    }

    pub fn connections_total(&self) -> usize {
        self.shared.total.load(Ordering::SeqCst)
    }

    /// Round trips so far over all connections: a burst of request bytes followed by replies
    /// counts once, however many commands it pipelines.
    pub fn round_trips(&self) -> usize {
        self.shared.round_trips.load(Ordering::SeqCst)
    }

    /// Abruptly closes every proxied connection (both sides): queued bytes are discarded and
    /// both peers get a reset, not an orderly close.
    pub fn reset_all(&self) {
        let conns: Vec<_> = lock(&self.shared.conns).values().cloned().collect();
        for c in conns {
            c.reset();
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        // accept() has no timeout: a connection of our own is what wakes it to see `stopping`.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
        // No new connection can appear now; tear down the existing ones. A full shutdown also
        // unblocks a writer stuck on a peer that stopped reading.
        let conns: Vec<_> = lock(&self.shared.conns).values().cloned().collect();
        for c in &conns {
            c.reset();
            let _ = c.client.shutdown(Shutdown::Both);
            let _ = c.server.shutdown(Shutdown::Both);
        }
        drop(conns);
        let threads = std::mem::take(&mut *lock(&self.shared.threads));
        for t in threads {
            let _ = t.join();
        }
    }
}

/// A poisoned lock only means another proxy thread panicked; the data is still usable.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn accept_loop(shared: &Arc<Shared>, listener: &TcpListener, upstream: SocketAddr) {
    let mut next_id = 0u64;
    for stream in listener.incoming() {
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        let Ok(client) = stream else { continue };
        shared.total.fetch_add(1, Ordering::SeqCst);
        // The upstream is a local redis-server: connecting is immediate, even in a black hole
        // (which then swallows the bytes instead). If it is down, the client sees a close.
        let Ok(server) = TcpStream::connect_timeout(&upstream, Duration::from_secs(5)) else {
            continue;
        };
        // lockrun disables Nagle; the proxy must not add the delay it avoids.
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        let (Ok(c_read), Ok(c_write), Ok(s_read), Ok(s_write)) = (
            client.try_clone(),
            client.try_clone(),
            server.try_clone(),
            server.try_clone(),
        ) else {
            continue;
        };
        let conn = Arc::new(Conn {
            client,
            server,
            closed: Mutex::new(false),
            wake: Condvar::new(),
            live: AtomicUsize::new(4),
            asking: AtomicBool::new(false),
        });
        let id = next_id;
        next_id += 1;
        lock(&shared.conns).insert(id, conn.clone());
        let (req_tx, req_rx) = channel();
        let (rep_tx, rep_rx) = channel();
        let mut threads = lock(&shared.threads);
        threads.retain(|t| !t.is_finished());
        let mut spawn = |name: &str, body: Box<dyn FnOnce() + Send>| {
            let (shared, conn) = (shared.clone(), conn.clone());
            let t = thread::Builder::new()
                .name(format!("proxy-{id}-{name}"))
                .spawn(move || {
                    body();
                    if conn.live.fetch_sub(1, Ordering::SeqCst) == 1 {
                        lock(&shared.conns).remove(&id);
                    }
                })
                .expect("proxy: spawn");
            threads.push(t);
        };
        let (sh, cn) = (shared.clone(), conn.clone());
        spawn(
            "req-in",
            Box::new(move || read_side(&sh, &cn, Dir::Requests, c_read, &req_tx)),
        );
        let (sh, cn) = (shared.clone(), conn.clone());
        spawn(
            "req-out",
            Box::new(move || write_side(&sh, &cn, Dir::Requests, s_write, req_rx)),
        );
        let (sh, cn) = (shared.clone(), conn.clone());
        spawn(
            "rep-in",
            Box::new(move || read_side(&sh, &cn, Dir::Replies, s_read, &rep_tx)),
        );
        let (sh, cn) = (shared.clone(), conn.clone());
        spawn(
            "rep-out",
            Box::new(move || write_side(&sh, &cn, Dir::Replies, c_write, rep_rx)),
        );
    }
}

/// Reads one direction and queues each chunk with its delivery time. A dropped end-of-stream
/// simply ends the queue: the far side then never learns of the close, as in a partition.
fn read_side(shared: &Shared, conn: &Conn, dir: Dir, mut src: TcpStream, tx: &Sender<Chunk>) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match src.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            // A reset by the peer ends the stream like a close does.
            Err(_) => 0,
        };
        if n > 0 {
            // Counted before the bytes are forwarded, so a reply can never precede its
            // request here.
            match dir {
                Dir::Requests if !conn.asking.swap(true, Ordering::SeqCst) => {
                    shared.round_trips.fetch_add(1, Ordering::SeqCst);
                }
                Dir::Requests => {}
                Dir::Replies => conn.asking.store(false, Ordering::SeqCst),
            }
        }
        if conn.is_closed() {
            return;
        }
        let fault = *lock(&shared.fault);
        if fault.drops(dir) {
            if n == 0 {
                return;
            }
            continue;
        }
        let chunk = (n > 0).then(|| buf[..n].to_vec());
        if tx.send((Instant::now() + fault.delay(dir), chunk)).is_err() || n == 0 {
            return;
        }
    }
}

/// Delivers one direction's queue in order, each chunk at its time. A write error (the peer
/// is gone) tears the whole connection down, as the kernel would with a reset.
fn write_side(shared: &Shared, conn: &Conn, dir: Dir, mut dst: TcpStream, rx: Receiver<Chunk>) {
    for (due, chunk) in rx {
        if !conn.sleep_until(due) {
            return;
        }
        // Still in flight when the direction started dropping: lost.
        if lock(&shared.fault).drops(dir) {
            if chunk.is_none() {
                return;
            }
            continue;
        }
        match chunk {
            Some(bytes) => {
                if dst.write_all(&bytes).is_err() {
                    conn.reset();
                    return;
                }
            }
            None => {
                let _ = dst.shutdown(Shutdown::Write);
                return;
            }
        }
    }
}

impl Conn {
    fn is_closed(&self) -> bool {
        *lock(&self.closed)
    }

    /// Sleeps until `due`; false if the connection was torn down meanwhile.
    fn sleep_until(&self, due: Instant) -> bool {
        let mut closed = lock(&self.closed);
        loop {
            if *closed {
                return false;
            }
            let now = Instant::now();
            if now >= due {
                return true;
            }
            closed = self
                .wake
                .wait_timeout(closed, due - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// SO_LINGER 0 makes the final close send RST instead of FIN; shutting down the read side
    /// only wakes our blocked readers without sending anything, so the peers' first news of
    /// it is the reset once the threads let go of the sockets (milliseconds later).
    fn reset(&self) {
        *lock(&self.closed) = true;
        self.wake.notify_all();
        for s in [&self.client, &self.server] {
            let linger = libc::linger {
                l_onoff: 1,
                l_linger: 0,
            };
            // SAFETY: setsockopt on a socket we own, with a correctly sized linger struct.
            unsafe {
                libc::setsockopt(
                    s.as_raw_fd(),
                    libc::SOL_SOCKET,
                    libc::SO_LINGER,
                    (&linger as *const libc::linger).cast(),
                    std::mem::size_of::<libc::linger>() as libc::socklen_t,
                );
            }
            let _ = s.shutdown(Shutdown::Read);
        }
    }
}
