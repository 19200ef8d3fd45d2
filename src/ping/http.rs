//! The one request a ping is: `GET` over HTTP/1.1, a new connection each time, and only the
//! answer's status read. Written here on `std::net` (and rustls, which `rediss://` links in
//! anyway) rather than taken from an HTTP client crate: such a client and its HTTP types made
//! the binary ~235 KB larger, and every run paid for them in resident pages whether it pinged
//! or not (docs/benchmarks.md, "No HTTP client crate for `--ping`"); a ping needs none of the
//! rest.
//!
//! An HTTP proxy from the environment is used as curl and most clients read it: the first of
//! `ALL_PROXY`, `HTTPS_PROXY`, `HTTP_PROXY` (or their lowercase forms) that is an `http://`
//! URL, through a `CONNECT` tunnel, unless `NO_PROXY` names the host.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};
use url::Url;

/// Why a request got no status.
#[derive(Debug)]
pub enum Error {
    /// The host name has no address (getaddrinfo(3) failed).
    HostNotFound,
    /// No address of the host (or the proxy) took the connection.
    Connect(io::Error),
    /// The bound passed.
    Timeout,
    /// Reading or writing failed once connected (TLS errors come as I/O errors with a
    /// `rustls::Error` inside).
    Io(io::Error),
    /// What came back is not an HTTP answer.
    Protocol,
    /// The proxy did not open the tunnel: its status.
    Proxy(u16),
    /// No TLS settings could be made.
    #[cfg(feature = "tls")]
    Tls(String),
}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Error {
        match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => Error::Timeout,
            _ => Error::Io(e),
        }
    }
}

/// How pings reach their URL: the TLS settings (for an https URL) and the proxy.
pub struct Client {
    #[cfg(feature = "tls")]
    tls: Option<Result<std::sync::Arc<rustls::ClientConfig>, String>>,
    proxy: Option<Proxy>,
    user_agent: &'static str,
}

/// An HTTP proxy: where it listens, its `Proxy-Authorization` (from the URL's user part), and
/// the hosts reached without it.
struct Proxy {
    host: String,
    port: u16,
    authorization: Option<String>,
    no_proxy: Vec<String>,
}

impl Client {
    /// For pings to `url`: the trust store is read only for an https URL.
    pub fn new(url: &Url, user_agent: &'static str) -> Client {
        #[cfg(not(feature = "tls"))]
        let _ = url;
        Client {
            #[cfg(feature = "tls")]
            tls: (url.scheme() == "https").then(tls::config),
            proxy: Proxy::from_env(|name| std::env::var(name).ok()),
            user_agent,
        }
    }

    /// `GET url`, within `timeout`: the answer's status code.
    pub fn get(&self, url: &Url, timeout: Duration) -> Result<u16, Error> {
        let deadline = Instant::now() + timeout;
        let host = match url.host() {
            Some(url::Host::Domain(d)) => d.to_string(),
            Some(url::Host::Ipv4(a)) => a.to_string(),
            Some(url::Host::Ipv6(a)) => a.to_string(),
            None => return Err(Error::HostNotFound),
        };
        let port = url.port_or_known_default().unwrap_or(80);
        let proxy = self.proxy.as_ref().filter(|p| !p.bypassed(&host));
        let mut tcp = match proxy {
            Some(p) => p.tunnel(&host, port, deadline)?,
            None => connect(&host, port, deadline)?,
        };
        let authority = match url.port() {
            Some(port) => format!("{}:{port}", url.host_str().unwrap_or_default()),
            None => url.host_str().unwrap_or_default().to_string(),
        };
        let request = format!(
            "GET {} HTTP/1.1\r\nHost: {authority}\r\nUser-Agent: {}\r\nAccept: */*\r\n\
             Connection: close\r\n\r\n",
            &url[url::Position::BeforePath..url::Position::AfterQuery],
            self.user_agent
        );
        #[cfg(feature = "tls")]
        if let Some(config) = &self.tls {
            let config = config.as_ref().map_err(|why| Error::Tls(why.clone()))?;
            let name = rustls::pki_types::ServerName::try_from(host)
                .map_err(|e| Error::Io(io::Error::new(io::ErrorKind::InvalidInput, e)))?;
            let conn = rustls::ClientConnection::new(config.clone(), name)
                .map_err(|e| Error::Io(io::Error::other(e)))?;
            let mut stream = rustls::StreamOwned::new(conn, tcp);
            return exchange(&mut stream, request.as_bytes(), deadline, |s, t| {
                s.sock.set_read_timeout(Some(t))?;
                s.sock.set_write_timeout(Some(t))
            });
        }
        exchange(&mut tcp, request.as_bytes(), deadline, |s, t| {
            s.set_read_timeout(Some(t))?;
            s.set_write_timeout(Some(t))
        })
    }
}

/// Sends `request` on `stream` and reads the status of the answer, each step bounded by what
/// is left until `deadline` (`bound` sets the socket's timeouts).
fn exchange<S: Read + Write>(
    stream: &mut S,
    request: &[u8],
    deadline: Instant,
    bound: impl Fn(&mut S, Duration) -> io::Result<()>,
) -> Result<u16, Error> {
    bound(stream, left(deadline)?)?;
    stream.write_all(request)?;
    stream.flush()?;
    let head = read_head(stream, deadline, bound)?;
    status(&head).ok_or(Error::Protocol)
}

/// The time left until `deadline`; none is a timeout (a zero socket timeout would mean none).
fn left(deadline: Instant) -> Result<Duration, Error> {
    match deadline.saturating_duration_since(Instant::now()) {
        d if d.is_zero() => Err(Error::Timeout),
        d => Ok(d),
    }
}

/// The answer's head (up to the blank line; at most 16 KiB), read byte by byte with no buffer
/// past it: nothing else of the answer is wanted.
fn read_head<S: Read>(
    stream: &mut S,
    deadline: Instant,
    bound: impl Fn(&mut S, Duration) -> io::Result<()>,
) -> Result<Vec<u8>, Error> {
    let mut head = Vec::new();
    let mut byte = [0u8];
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() > 16 * 1024 {
            return Err(Error::Protocol);
        }
        bound(stream, left(deadline)?)?;
        match stream.read(&mut byte) {
            Ok(0) if head.is_empty() => return Err(Error::Protocol),
            Ok(0) => break,
            Ok(_) => head.push(byte[0]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(head)
}

/// The status code of an answer's head: `HTTP/1.x NNN …`.
fn status(head: &[u8]) -> Option<u16> {
    let line = head.split(|&b| b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut words = line.split_whitespace();
    if !words.next()?.starts_with("HTTP/1.") {
        return None;
    }
    let code = words.next()?;
    (code.len() == 3).then(|| code.parse().ok()).flatten()
}

/// A TCP connection to `host:port`: its addresses looked up here, on the caller's thread
/// (getaddrinfo(3), unbounded: the caller's own wait is what is bounded), each tried in turn
/// within what is left of the bound.
fn connect(host: &str, port: u16, deadline: Instant) -> Result<TcpStream, Error> {
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|_| Error::HostNotFound)?
        .collect();
    let mut last = None;
    for addr in addrs {
        match TcpStream::connect_timeout(&addr, left(deadline)?) {
            Ok(tcp) => return Ok(tcp),
            Err(e) => last = Some(e),
        }
    }
    match last {
        Some(e)
            if matches!(
                e.kind(),
                io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
            ) =>
        {
            Err(Error::Timeout)
        }
        Some(e) => Err(Error::Connect(e)),
        None => Err(Error::HostNotFound),
    }
}

impl Proxy {
    /// The proxy the environment names (`var` reads a variable), if an `http://` one does.
    fn from_env(var: impl Fn(&str) -> Option<String>) -> Option<Proxy> {
        let given = [
            "ALL_PROXY",
            "all_proxy",
            "HTTPS_PROXY",
            "https_proxy",
            "HTTP_PROXY",
            "http_proxy",
        ]
        .iter()
        .filter_map(|name| var(name).filter(|v| !v.is_empty()))
        .find_map(|v| {
            let v = if v.contains("://") {
                v
            } else {
                format!("http://{v}")
            };
            Url::parse(&v).ok().filter(|u| u.scheme() == "http")
        })?;
        let authorization = (!given.username().is_empty()).then(|| {
            let user = percent_decoded(given.username());
            let password = percent_decoded(given.password().unwrap_or_default());
            format!("Basic {}", base64(format!("{user}:{password}").as_bytes()))
        });
        let no_proxy = ["NO_PROXY", "no_proxy"]
            .iter()
            .find_map(|name| var(name))
            .unwrap_or_default()
            .split(',')
            .map(|e| e.trim().to_ascii_lowercase())
            .filter(|e| !e.is_empty())
            .collect();
        Some(Proxy {
            host: match given.host()? {
                url::Host::Ipv6(a) => a.to_string(),
                h => h.to_string(),
            },
            port: given.port_or_known_default().unwrap_or(80),
            authorization,
            no_proxy,
        })
    }

    /// Whether `host` is reached without the proxy: `NO_PROXY` names it or a domain of it
    /// (`example.com`, `.example.com` or `*.example.com` for `hc.example.com`), or is `*`.
    fn bypassed(&self, host: &str) -> bool {
        let host = host.to_ascii_lowercase();
        self.no_proxy.iter().any(|entry| {
            let domain = entry.trim_start_matches('*').trim_start_matches('.');
            entry == "*" || host == domain || host.ends_with(&format!(".{domain}"))
        })
    }

    /// A connection to `host:port` through the proxy (`CONNECT`), ready for the request (or
    /// the TLS handshake).
    fn tunnel(&self, host: &str, port: u16, deadline: Instant) -> Result<TcpStream, Error> {
        let mut tcp = connect(&self.host, self.port, deadline)?;
        let target = match host.contains(':') {
            true => format!("[{host}]:{port}"),
            false => format!("{host}:{port}"),
        };
        let authorization = match &self.authorization {
            Some(a) => format!("Proxy-Authorization: {a}\r\n"),
            None => String::new(),
        };
        let request = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n{authorization}\r\n");
        let bound = |s: &mut TcpStream, t| {
            s.set_read_timeout(Some(t))?;
            s.set_write_timeout(Some(t))
        };
        match exchange(&mut tcp, request.as_bytes(), deadline, bound)? {
            200..=299 => Ok(tcp),
            code => Err(Error::Proxy(code)),
        }
    }
}

/// `%XX` sequences decoded (a proxy's user and password in its URL).
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Standard base64 with padding (RFC 4648), for `Proxy-Authorization: Basic`.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            out.push(match i <= chunk.len() {
                true => char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]),
                false => '=',
            });
        }
    }
    out
}

#[cfg(feature = "tls")]
mod tls {
    use std::sync::Arc;

    /// rustls with the ring provider and the system's trust store (or the PEM bundle in
    /// SSL_CERT_FILE), as for rediss://.
    pub(super) fn config() -> Result<Arc<rustls::ClientConfig>, String> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Arc::new(config))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answers_status_is_read() {
        assert_eq!(status(b"HTTP/1.1 200 OK\r\n\r\n"), Some(200));
        assert_eq!(status(b"HTTP/1.0 404\r\n\r\n"), Some(404));
        assert_eq!(status(b"SSH-2.0-OpenSSH\r\n"), None);
        assert_eq!(status(b"HTTP/1.1 20 OK\r\n\r\n"), None);
    }

    #[test]
    fn base64_as_rfc_4648_says() {
        for (plain, coded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("user:p@ss", "dXNlcjpwQHNz"),
        ] {
            assert_eq!(base64(plain.as_bytes()), coded);
        }
    }

    #[test]
    fn the_proxy_comes_from_the_environment() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                vars.iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert!(Proxy::from_env(env(&[])).is_none());
        assert!(Proxy::from_env(env(&[("ALL_PROXY", "socks5://h:1080")])).is_none());
        let p = Proxy::from_env(env(&[
            ("https_proxy", "http://u%40x:p%3Aw@proxy.internal:3128"),
            ("NO_PROXY", "localhost, .internal,*.corp"),
        ]))
        .unwrap();
        assert_eq!((p.host.as_str(), p.port), ("proxy.internal", 3128));
        assert_eq!(
            p.authorization.as_deref(),
            Some(format!("Basic {}", base64(b"u@x:p:w")).as_str())
        );
        assert!(p.bypassed("localhost"));
        assert!(p.bypassed("hc.internal"));
        assert!(p.bypassed("a.b.CORP"));
        assert!(!p.bypassed("hc-ping.com"));
        assert!(!p.bypassed("notinternal"));
        let p = Proxy::from_env(env(&[("HTTP_PROXY", "proxy:8080")])).unwrap();
        assert_eq!(
            (p.host.as_str(), p.port, p.no_proxy.len()),
            ("proxy", 8080, 0)
        );
    }
}
