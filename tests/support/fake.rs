//! A fake server on a loopback port that answers every command the same way: what lockrun
//! must refuse in one line (`server_refusals.rs`) and what `doctor` must fail (`doctor.rs`).

use std::time::Duration;

/// A server that answers every command the same way, on a loopback port: `reply` to each
/// command it reads (a RESP array of bulk strings, as clients send them). Stops when dropped.
pub struct Fake {
    pub port: u16,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Fake {
    pub fn start(reply: &'static [u8]) -> Fake {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = stop.clone();
        std::thread::spawn(move || {
            while !stopped.load(std::sync::atomic::Ordering::Relaxed) {
                let Ok((mut conn, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                };
                std::thread::spawn(move || {
                    conn.set_nonblocking(false).unwrap();
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    while let Ok(n) = conn.read(&mut chunk) {
                        if n == 0 {
                            break;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                        while let Some(used) = whole_command(&buf) {
                            buf.drain(..used);
                            if conn.write_all(reply).is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        Fake { port, stop }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The length of the first complete command in `buf` (`*N\r\n` then N `$len\r\n…\r\n`).
fn whole_command(buf: &[u8]) -> Option<usize> {
    let line = |at: usize| -> Option<(usize, usize)> {
        let end = buf[at..].windows(2).position(|w| w == b"\r\n")? + at;
        let n = std::str::from_utf8(&buf[at + 1..end]).ok()?.parse().ok()?;
        Some((n, end + 2))
    };
    let (count, mut at) = line(0)?;
    for _ in 0..count {
        let (len, start) = line(at)?;
        at = start + len + 2;
        if at > buf.len() {
            return None;
        }
    }
    Some(at)
}
