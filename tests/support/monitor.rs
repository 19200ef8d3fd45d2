//! A health-check monitor for `--ping`: an HTTP server on a port of 127.0.0.1 the system picks,
//! that records each request it gets (and, at that moment, what `probe` says: whether the lock
//! is still held) and answers as told: with a status, never, or not at all (nothing listens).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// How the monitor answers.
#[derive(Clone, Debug)]
pub enum Answer {
    /// These statuses, one per request in order; the last one for every request after.
    Statuses(Vec<u16>),
    /// Reads the request and never answers (the connection stays open).
    Never,
}

/// One request the monitor got.
#[derive(Clone, Debug)]
pub struct Request {
    pub method: String,
    /// The path and query, as sent.
    pub path: String,
    pub at: Instant,
    /// What `probe` said when it came.
    pub probed: String,
}

impl Request {
    /// The run id (the query's `rid`), if it has one.
    pub fn rid(&self) -> Option<&str> {
        let (_, query) = self.path.split_once('?')?;
        query.split('&').find_map(|p| p.strip_prefix("rid="))
    }

    /// The path and query without the run id, which is random per run: what tests compare.
    pub fn without_rid(&self) -> String {
        without_rid(&self.path)
    }
}

/// `path` (a path and query) without the query's `rid` parameter.
pub fn without_rid(path: &str) -> String {
    let Some((path, query)) = path.split_once('?') else {
        return path.to_string();
    };
    let kept: Vec<&str> = query
        .split('&')
        .filter(|p| !p.starts_with("rid="))
        .collect();
    match kept.is_empty() {
        true => path.to_string(),
        false => format!("{path}?{}", kept.join("&")),
    }
}

type Probe = Box<dyn Fn() -> String + Send + Sync>;

pub struct Monitor {
    port: u16,
    requests: Arc<Mutex<Vec<Request>>>,
}

impl Monitor {
    /// A monitor answering 200 to everything.
    pub fn start() -> Monitor {
        Monitor::answering(Answer::Statuses(vec![200]), Box::new(String::new))
    }

    pub fn answering(answer: Answer, probe: Probe) -> Monitor {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the monitor");
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let (log, probe) = (requests.clone(), Arc::new(probe));
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let (log, probe, answer) = (log.clone(), probe.clone(), answer.clone());
                thread::spawn(move || serve(stream, &log, &probe, &answer));
            }
        });
        Monitor { port, requests }
    }

    /// `http://127.0.0.1:<port>/<path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}/{path}", self.port)
    }

    pub fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }

    /// "METHOD path" of each request so far, the run id left out ([`Request::without_rid`]).
    pub fn lines(&self) -> Vec<String> {
        self.requests()
            .iter()
            .map(|r| format!("{} {}", r.method, r.without_rid()))
            .collect()
    }
}

/// A URL where nothing listens: the connection is refused.
pub fn refusing_url(path: &str) -> String {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    format!("http://127.0.0.1:{port}/{path}")
}

fn serve(mut stream: TcpStream, log: &Mutex<Vec<Request>>, probe: &Probe, answer: &Answer) {
    // Requests on one connection, one after another (a client may keep it open).
    let mut buf = Vec::new();
    loop {
        let head = loop {
            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                buf.drain(..end + 4);
                break head;
            }
            let mut chunk = [0u8; 4096];
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let mut words = head.lines().next().unwrap_or_default().split(' ');
        let request = Request {
            method: words.next().unwrap_or_default().to_string(),
            path: words.next().unwrap_or_default().to_string(),
            at: Instant::now(),
            probed: probe(),
        };
        let index = {
            let mut log = log.lock().unwrap();
            log.push(request);
            log.len() - 1
        };
        let status = match answer {
            Answer::Never => {
                // Held open, unanswered, for longer than any test waits.
                thread::sleep(Duration::from_secs(600));
                return;
            }
            Answer::Statuses(statuses) => statuses[index.min(statuses.len() - 1)],
        };
        // A redirect names the same path over https (as an http-to-https redirect would).
        let location = match status {
            300..=399 => {
                let port = stream.local_addr().map(|a| a.port()).unwrap_or_default();
                format!(
                    "Location: https://127.0.0.1:{port}{}\r\n",
                    log.lock().unwrap()[index].path
                )
            }
            _ => String::new(),
        };
        let reply = format!("HTTP/1.1 {status} X\r\n{location}Content-Length: 2\r\n\r\nOK");
        if stream.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}

/// An HTTP proxy that opens `CONNECT` tunnels (answering `status`; 200 opens it) and records
/// each request line it gets.
pub struct ConnectProxy {
    port: u16,
    lines: Arc<Mutex<Vec<String>>>,
}

impl ConnectProxy {
    pub fn start(status: u16) -> ConnectProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let port = listener.local_addr().unwrap().port();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let log = lines.clone();
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let log = log.clone();
                thread::spawn(move || tunnel(stream, &log, status));
            }
        });
        ConnectProxy { port, lines }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The request line of each request so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }
}

fn tunnel(mut client: TcpStream, log: &Mutex<Vec<String>>, status: u16) {
    let mut head = Vec::new();
    let mut byte = [0u8];
    while !head.ends_with(b"\r\n\r\n") {
        match client.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return,
        }
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let line = head.lines().next().unwrap_or_default().to_string();
    log.lock().unwrap().push(line.clone());
    let target = line.split(' ').nth(1).unwrap_or_default().to_string();
    let server = match (status, line.starts_with("CONNECT ")) {
        (200, true) => TcpStream::connect(&target).ok(),
        _ => None,
    };
    let Some(mut server) = server else {
        let code = if status == 200 { 502 } else { status };
        let _ =
            client.write_all(format!("HTTP/1.1 {code} No\r\nContent-Length: 0\r\n\r\n").as_bytes());
        return;
    };
    if client
        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .is_err()
    {
        return;
    }
    let (mut c2, mut s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
    thread::spawn(move || {
        let _ = std::io::copy(&mut c2, &mut s2);
        let _ = s2.shutdown(std::net::Shutdown::Write);
    });
    let _ = std::io::copy(&mut server, &mut client);
    let _ = client.shutdown(std::net::Shutdown::Write);
}
