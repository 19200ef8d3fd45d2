//! What clients ask of a server, read with MONITOR on its unix socket (which no network fault
//! touches): every command of every client but Lua's own calls, with the server's time and the
//! client's address, for counting each host's requests.

use std::io::{BufRead, BufReader, Write as _};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::thread;

/// One command a client sent: (server time, client address, command).
pub type Seen = (f64, String, String);

/// MONITOR on the server's unix socket, every command of every client but Lua's own calls.
pub struct RedisMonitor {
    stream: UnixStream,
    reader: thread::JoinHandle<()>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

/// `+1764258000.123456 [0 10.77.0.2:45678] "EVALSHA" "…" …` → (time, `10.77.0.2`, `EVALSHA`);
/// `None` for Lua's own calls (`[0 lua]`) and anything else.
pub fn parse_monitor(line: &str) -> Option<Seen> {
    let rest = line.strip_prefix('+')?;
    let (t, rest) = rest.split_once(" [")?;
    let (client, rest) = rest.split_once("] \"")?;
    let (_, client) = client.split_once(' ')?;
    if client == "lua" {
        return None;
    }
    let ip = client.rsplit_once(':').map_or(client, |(ip, _)| ip);
    let cmd = rest.split('"').next()?;
    Some((t.parse().ok()?, ip.to_string(), cmd.to_ascii_uppercase()))
}

impl RedisMonitor {
    pub fn start(socket: &Path) -> RedisMonitor {
        let mut stream = UnixStream::connect(socket).expect("MONITOR: connect");
        stream.write_all(b"MONITOR\r\n").unwrap();
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let (r, s) = (stream.try_clone().unwrap(), seen.clone());
        let reader = thread::spawn(move || {
            let mut r = BufReader::new(r);
            let mut buf = Vec::new();
            while r.read_until(b'\n', &mut buf).is_ok_and(|n| n > 0) {
                if let Some(x) = parse_monitor(String::from_utf8_lossy(&buf).trim_end()) {
                    s.lock().unwrap().push(x);
                }
                buf.clear();
            }
        });
        RedisMonitor {
            stream,
            reader,
            seen,
        }
    }

    /// Ends MONITOR; every command seen, in order.
    pub fn stop(self) -> Vec<Seen> {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
        let _ = self.reader.join();
        std::mem::take(&mut *self.seen.lock().unwrap())
    }
}
