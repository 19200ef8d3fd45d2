//! Servers that misbehave, on loopback ports: [`Fake`] answers every command itself (the same
//! way, or as a function of the command), for what lockrun must refuse in one line
//! (`server_refusals.rs`) and what `doctor` must fail (`doctor.rs`); [`Tamper`] stands in front
//! of a real server and rewrites the replies to chosen script calls, so the server really does
//! what lockrun asked while lockrun gets an answer no Redis gives.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A command as clients send it: its words (the command name first).
pub type Words = Vec<Vec<u8>>;

/// A server that answers each command it reads (a RESP array of bulk strings, as clients send
/// them) with what its function makes of it. Stops when dropped.
pub struct Fake {
    pub port: u16,
    stop: Arc<AtomicBool>,
    asked: Arc<AtomicUsize>,
}

impl Fake {
    /// Answers every command with `reply`.
    pub fn start(reply: &'static [u8]) -> Fake {
        Fake::answering(move |_| reply.to_vec())
    }

    /// Answers each command with `answer(words)`.
    pub fn answering(answer: impl Fn(&Words) -> Vec<u8> + Send + Sync + 'static) -> Fake {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let asked = Arc::new(AtomicUsize::new(0));
        let answer = Arc::new(answer);
        let (stopped, counted) = (stop.clone(), asked.clone());
        serve(listener, stop.clone(), move |mut conn| {
            let (answer, counted) = (answer.clone(), counted.clone());
            let mut buf = Vec::new();
            while let Some(words) = next_command(&mut conn, &mut buf) {
                counted.fetch_add(1, Ordering::Relaxed);
                if stopped.load(Ordering::Relaxed) || conn.write_all(&answer(&words)).is_err() {
                    return;
                }
            }
        });
        Fake { port, stop, asked }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// How many commands it has answered so far, over all connections.
    pub fn asked(&self) -> usize {
        self.asked.load(Ordering::Relaxed)
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// What [`Tamper`] does with the reply to one script call.
pub enum Rewrite {
    /// Hands it on as the server gave it.
    Pass,
    /// Sends these bytes instead.
    Send(Vec<u8>),
    /// Sends nothing, ever, and keeps the connection open: a server that hangs.
    Withhold,
    /// Closes the connection instead: the reply is lost with it.
    Close,
}

/// A proxy in front of a real server that hands every reply on as it came, except the replies
/// to script calls that ran (`EVAL`/`EVALSHA`, not answered `NOSCRIPT`): the `n`th of those
/// (0-based, over all connections) is handed to the rewrite function with the server's own
/// reply. One command at a time per connection (each is answered before the next is
/// forwarded), so it suits request-reply connections, not a subscription.
pub struct Tamper {
    pub port: u16,
    stop: Arc<AtomicBool>,
}

impl Tamper {
    pub fn start(
        upstream: SocketAddr,
        rewrite: impl Fn(usize, &[u8]) -> Rewrite + Send + Sync + 'static,
    ) -> Tamper {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let scripts = Arc::new(AtomicUsize::new(0));
        let rewrite = Arc::new(rewrite);
        let stopped = stop.clone();
        serve(listener, stop.clone(), move |mut client| {
            let (scripts, rewrite) = (scripts.clone(), rewrite.clone());
            let Ok(mut server) = TcpStream::connect(upstream) else {
                return;
            };
            let (mut asked, mut answered) = (Vec::new(), Vec::new());
            while let Some(words) = next_command(&mut client, &mut asked) {
                let Some(reply) = forward(&mut server, &words, &mut answered) else {
                    return;
                };
                let name = words[0].to_ascii_uppercase();
                let ran =
                    (name == b"EVAL" || name == b"EVALSHA") && !reply.starts_with(b"-NOSCRIPT");
                let sent = if ran {
                    rewrite(scripts.fetch_add(1, Ordering::SeqCst), &reply)
                } else {
                    Rewrite::Pass
                };
                let bytes = match sent {
                    Rewrite::Pass => reply,
                    Rewrite::Send(bytes) => bytes,
                    Rewrite::Close => return,
                    Rewrite::Withhold => {
                        // Reads on (and answers nothing) until the client closes the
                        // connection or the test ends.
                        while !stopped.load(Ordering::Relaxed) {
                            match client.read(&mut [0u8; 512]) {
                                Ok(0) => return,
                                Err(e) if !paused(&e) => return,
                                _ => {}
                            }
                        }
                        return;
                    }
                };
                if client.write_all(&bytes).is_err() {
                    return;
                }
            }
        });
        Tamper { port, stop }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for Tamper {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Accepts connections on `listener` until `stop`, each served by `serve` on a thread of its
/// own (blocking, with a read timeout so that a served connection notices `stop` too).
fn serve(
    listener: TcpListener,
    stop: Arc<AtomicBool>,
    serve: impl Fn(TcpStream) + Send + Sync + 'static,
) {
    listener.set_nonblocking(true).unwrap();
    let serve = Arc::new(serve);
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            let Ok((conn, _)) = listener.accept() else {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            };
            conn.set_nonblocking(false).unwrap();
            conn.set_read_timeout(Some(Duration::from_millis(200)))
                .unwrap();
            let _ = conn.set_nodelay(true);
            let serve = serve.clone();
            std::thread::spawn(move || serve(conn));
        }
    });
}

/// Reads from `conn` (with `buf` holding what was read before) until one whole command is in;
/// `None` when the client closed the connection. A read timeout is only a pause.
fn next_command(conn: &mut TcpStream, buf: &mut Vec<u8>) -> Option<Words> {
    let mut chunk = [0u8; 16 * 1024];
    loop {
        if let Some((words, used)) = command(buf) {
            buf.drain(..used);
            return Some(words);
        }
        match conn.read(&mut chunk) {
            Ok(0) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if paused(&e) => {}
            Err(_) => return None,
        }
    }
}

/// A read that timed out (see [`serve`]): nothing came for a while, the connection is fine.
fn paused(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

/// Sends `words` to the server and reads its whole reply; `None` if the server went away.
fn forward(server: &mut TcpStream, words: &Words, buf: &mut Vec<u8>) -> Option<Vec<u8>> {
    let mut out = format!("*{}\r\n", words.len()).into_bytes();
    for w in words {
        out.extend_from_slice(format!("${}\r\n", w.len()).as_bytes());
        out.extend_from_slice(w);
        out.extend_from_slice(b"\r\n");
    }
    server.write_all(&out).ok()?;
    let mut chunk = [0u8; 16 * 1024];
    loop {
        if let Some(used) = value(buf, 0) {
            return Some(buf.drain(..used).collect());
        }
        match server.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// The line starting at `at` (without its CRLF) and where the next one starts.
fn line(buf: &[u8], at: usize) -> Option<(&[u8], usize)> {
    let end = buf.get(at..)?.windows(2).position(|w| w == b"\r\n")? + at;
    Some((&buf[at..end], end + 2))
}

/// The number after a type byte (`*3`, `$5`).
fn number(head: &[u8]) -> Option<i64> {
    std::str::from_utf8(head.get(1..)?).ok()?.parse().ok()
}

/// The first complete command in `buf` (`*N\r\n` then N `$len\r\n…\r\n`) and its length.
fn command(buf: &[u8]) -> Option<(Words, usize)> {
    let (head, mut at) = line(buf, 0)?;
    let mut words = Vec::new();
    for _ in 0..number(head)? {
        let (head, start) = line(buf, at)?;
        let len = usize::try_from(number(head)?).ok()?;
        at = start + len + 2;
        words.push(buf.get(start..start + len)?.to_vec());
        if at > buf.len() {
            return None;
        }
    }
    Some((words, at))
}

/// Where the whole RESP value starting at `at` ends (RESP2 and RESP3 types), if it is all in.
fn value(buf: &[u8], at: usize) -> Option<usize> {
    let (head, next) = line(buf, at)?;
    let n = || number(head);
    let children = |count: i64, mut at: usize| {
        for _ in 0..count.max(0) {
            at = value(buf, at)?;
        }
        Some(at)
    };
    match head.first()? {
        b'+' | b'-' | b':' | b',' | b'#' | b'_' | b'(' => Some(next),
        b'$' | b'!' | b'=' => match n()? {
            -1 => Some(next),
            len => (next + len as usize + 2 <= buf.len()).then_some(next + len as usize + 2),
        },
        b'*' | b'~' | b'>' => children(n()?, next),
        b'%' => children(n()? * 2, next),
        // An attribute is followed by the value it describes.
        b'|' => value(buf, children(n()? * 2, next)?),
        _ => None,
    }
}
