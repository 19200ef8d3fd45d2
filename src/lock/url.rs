//! How a URL and the password options become redis-rs [`ConnectionInfo`], and how a URL is
//! shown to people.
//!
//! Passwords reach lockrun in four places: the URL's user info (`redis://user:pw@host`), the
//! URL's query (`unix:///path?user=U&pass=P`, the only place redis-rs reads them from for a
//! unix socket), `LOCKRUN_REDIS_PASSWORD`, and `--redis-password-file`. None of them may ever
//! appear in a message, whatever the log level or format: every message about the server is
//! built from [`Target::shown`] and passed through [`Secrets::scrub`].

use redis::{ConnectionInfo, IntoConnectionInfo};
use std::fmt;
use std::path::Path;

/// Schemes redis-rs 1.8 connects over TCP; their credentials are the URL's user info (the
/// query is read only for `protocol`).
const TCP_SCHEMES: [&str; 4] = ["redis", "rediss", "valkey", "valkeys"];
/// Schemes redis-rs connects over a unix socket; their credentials are the query parameters
/// `user` and `pass` (user info is ignored there).
const UNIX_SCHEMES: [&str; 3] = ["unix", "redis+unix", "valkey+unix"];
/// Query parameters known to carry nothing secret, shown as given. Every other parameter's
/// value is shown as `***`: not only `pass`, but `password` (which redis-rs ignores, yet a user
/// who typed it meant a password), `user`, and anything a password with an unencoded `&` spills
/// into (`pass=a&b` makes a parameter `b`).
const HARMLESS_PARAMS: [&str; 2] = ["db", "protocol"];
/// Query parameters whose values are passwords, to be scrubbed from messages as well.
const PASSWORD_PARAMS: [&str; 2] = ["pass", "password"];

/// How every message about a URL lockrun refuses begins, whatever found the fault: `plan`
/// tells these messages by it, to say where the URL came from (`LOCKRUN_REDIS_URL` or `-r`).
pub const INVALID: &str = "invalid Redis URL";

/// The one hint for every URL whose credentials cannot be told apart from the rest: how to
/// write them unambiguously, or how to keep them out of the URL altogether.
const ENCODE_HINT: &str = "percent-encode the user name and password ('@' -> %40, '/' -> %2F, \
'?' -> %3F, '#' -> %23, '%' -> %25, ':' in a user name -> %3A), or pass the password in \
LOCKRUN_REDIS_PASSWORD or --redis-password-file";

/// Credentials given outside the URL. They override the URL's, so a URL can be shared (in a
/// crontab, a unit file, `ps`) while the password stays in the environment or a file.
#[derive(Default)]
pub struct Credentials {
    user: Option<String>,
    password: Option<String>,
}

/// Certificates given by option for `rediss://`: a CA bundle to trust instead of the system
/// store (a private CA without touching the machine's trust store), and a client certificate
/// for servers that require one (`tls-auth-clients yes`).
#[derive(Default)]
pub struct TlsFiles {
    pub ca: Option<std::path::PathBuf>,
    pub cert: Option<std::path::PathBuf>,
    pub key: Option<std::path::PathBuf>,
}

/// The certificates the `--tls-*` files hold, as redis-rs takes them. A build without the `tls`
/// feature has none (and no rediss://), so the type has no value there.
#[cfg(feature = "tls")]
pub type Certs = redis::TlsCertificates;
#[cfg(not(feature = "tls"))]
#[derive(Clone, Debug)]
pub enum Certs {}

impl TlsFiles {
    /// Reads the files; None when no option was given (the system trust store applies). Errors
    /// name the option and the file, never a file's content (a key is a secret).
    pub fn load(&self, url_is_tls: bool) -> Result<Option<Certs>, String> {
        if self.ca.is_none() && self.cert.is_none() && self.key.is_none() {
            return Ok(None);
        }
        if !url_is_tls {
            return Err("--tls-ca, --tls-cert and --tls-key need a rediss:// URL".into());
        }
        self.read()
    }

    #[cfg(not(feature = "tls"))]
    fn read(&self) -> Result<Option<Certs>, String> {
        Err("--tls-ca, --tls-cert and --tls-key need lockrun built with TLS (its default `tls` feature)".into())
    }

    #[cfg(feature = "tls")]
    fn read(&self) -> Result<Option<Certs>, String> {
        let read = |what: &str, p: &Path| {
            crate::option_file::read(p)
                .map_err(|e| format!("cannot read the {what} file '{}': {e}", p.display()))
        };
        let client_tls = match (&self.cert, &self.key) {
            (Some(c), Some(k)) => Some(redis::ClientTlsConfig {
                client_cert: read("--tls-cert", c)?,
                client_key: read("--tls-key", k)?,
            }),
            (None, None) => None,
            _ => return Err("--tls-cert and --tls-key go together".into()),
        };
        let root_cert = match &self.ca {
            Some(p) => Some(read("--tls-ca", p)?),
            None => None,
        };
        Ok(Some(redis::TlsCertificates {
            client_tls,
            root_cert,
        }))
    }
}

/// Never prints the password, should a `{:?}` ever reach a log line.
impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .finish()
    }
}

impl Credentials {
    /// From `--redis-user`, `LOCKRUN_REDIS_PASSWORD` (`env_password`; empty counts as unset,
    /// as cron and compose files often define variables empty) and `--redis-password-file`.
    /// Two sources of one password are refused rather than one silently winning: the one
    /// ignored would be the one the user thinks is in effect. Errors name the file, never its
    /// content.
    pub fn from_options(
        user: Option<&str>,
        env_password: Option<std::ffi::OsString>,
        password_file: Option<&Path>,
    ) -> Result<Credentials, String> {
        let password = password_from("LOCKRUN_REDIS_PASSWORD", env_password, password_file)?;
        Ok(Credentials {
            user: user.map(str::to_string),
            password,
        })
    }
}

/// One password from an environment variable (`env_name`; empty counts as unset) or a file.
/// Also the sentinels' password (`LOCKRUN_SENTINEL_PASSWORD`, `--sentinel-password-file`).
pub fn password_from(
    env_name: &str,
    env_password: Option<std::ffi::OsString>,
    password_file: Option<&Path>,
) -> Result<Option<String>, String> {
    let env_password = match env_password {
        Some(p) if p.is_empty() => None,
        Some(p) => Some(strip_newline(p.into_string().map_err(|_| {
            format!("{env_name} is not valid UTF-8 (the Redis client sends text passwords only)")
        })?)),
        None => None,
    };
    Ok(match (env_password, password_file) {
        (Some(_), Some(file)) => {
            return Err(format!(
                "both {env_name} and the password file '{}' are set; use one",
                file.display()
            ))
        }
        (Some(p), None) => Some(p),
        (None, Some(file)) => Some(read_password_file(file)?),
        (None, None) => None,
    })
}

/// One trailing newline (`\n` or `\r\n`) off: `echo pw > file` and a Kubernetes Secret made
/// with `echo` add one; a second one would be part of the password.
fn strip_newline(mut text: String) -> String {
    if text.ends_with('\n') {
        text.pop();
        if text.ends_with('\r') {
            text.pop();
        }
    }
    text
}

/// The file's content minus one trailing newline (`echo pw > file` writes one; a second one
/// would be part of the password). Empty is an error: an empty password is never what was
/// meant, and sending none would fail later with a less helpful NOAUTH.
fn read_password_file(file: &Path) -> Result<String, String> {
    let shown = file.display();
    let bytes = crate::option_file::read(file)
        .map_err(|e| format!("cannot read the Redis password file '{shown}': {e}"))?;
    let text = strip_newline(String::from_utf8(bytes).map_err(|_| {
        format!("the Redis password file '{shown}' is not UTF-8 text (the Redis client sends text passwords only)")
    })?);
    if text.is_empty() {
        return Err(format!("the Redis password file '{shown}' is empty"));
    }
    Ok(text)
}

/// Every form a secret may take in a message: as given, and percent-decoded (redis-rs decodes
/// user info, and the query both ways, `%XX` and `+`), so an error that quotes what the
/// client actually used is caught too.
#[derive(Clone, Default)]
pub struct Secrets(Vec<String>);

impl Secrets {
    fn add(&mut self, secret: &str) {
        for form in [
            secret.to_string(),
            percent_decode(secret, false),
            percent_decode(secret, true),
        ] {
            if !form.is_empty() && !self.0.contains(&form) {
                self.0.push(form);
            }
        }
        // Longest first, so a secret that contains another is replaced whole.
        self.0.sort_by_key(|s| std::cmp::Reverse(s.len()));
    }

    /// A secret given outside any URL (e.g. the sentinels' password).
    pub fn add_secret(&mut self, secret: &str) {
        self.add(secret);
    }

    /// Every secret of `other` too (one URL naming several nodes).
    pub fn extend(&mut self, other: Secrets) {
        for s in other.0 {
            self.add(&s);
        }
    }

    /// Replaces every form of every secret in `message` (e.g. an error that quotes the URL).
    pub fn scrub(&self, message: &str) -> String {
        self.0
            .iter()
            .fold(message.to_string(), |m, s| m.replace(s.as_str(), "***"))
    }
}

/// Where to connect and as whom, and what may be said about it.
pub struct Target {
    pub info: ConnectionInfo,
    /// The URL with every credential replaced by `***`: the only form any message may quote.
    pub shown: String,
    pub secrets: Secrets,
}

/// Parses `url` the way redis-rs does, after refusing the URLs it would parse differently from
/// what was meant (and whose redaction would then leak part of a password), and applies the
/// credentials given outside the URL on top. Validates without connecting.
pub fn target(url: &str, creds: &Credentials) -> Result<Target, String> {
    let parts = split(url)?;
    let shown = parts.redacted();
    let mut secrets = Secrets::default();
    for s in parts.secrets() {
        secrets.add(s);
    }
    let invalid = |e: &dyn fmt::Display, secrets: &Secrets| {
        secrets.scrub(&format!("{INVALID} '{shown}': {e}"))
    };
    // redis-rs takes a TCP URL's database from its path and ignores a `db` query parameter
    // (`redis://h/2?db=3` used 2, `redis://h?db=3` used 0): refused rather than half-read.
    let db_param = parts
        .query
        .unwrap_or("")
        .split('&')
        .any(|item| param_name(item.split('=').next().unwrap_or("")) == "db");
    if TCP_SCHEMES.contains(&parts.scheme) && db_param {
        return Err(format!(
            "{INVALID} '{shown}': a {}:// URL names its database in the path \
             ({}://host:port/3), not with ?db=",
            parts.scheme, parts.scheme
        ));
    }
    let info = url.into_connection_info().map_err(|e| {
        // redis-rs says "did not parse" for whatever the URL parser refused: the parser's own
        // reason says what ("invalid port number", "empty host"; a fixed text that quotes
        // nothing of the URL).
        let why = match ::url::Url::parse(url) {
            Err(parse) => parse.to_string(),
            Ok(_) => super::redis_errors::config_words(&e),
        };
        invalid(&why, &secrets)
    })?;
    // CLIENT SETINFO would add a round trip to every run for a label nobody reads.
    let mut settings = info.redis_settings().clone().set_skip_set_lib_name();
    if let Some(p) = settings.password() {
        secrets.add(p);
    }
    if let Some(user) = &creds.user {
        settings = settings.set_username(user);
    }
    if let Some(p) = &creds.password {
        secrets.add(p);
        settings = settings.set_password(p);
    }
    // redis-rs authenticates only when it has a password: a user name alone would be dropped
    // without a word, and lockrun would run as the default user.
    if creds.user.is_some() && settings.password().is_none() {
        return Err(
            "--redis-user (LOCKRUN_REDIS_USER) needs a password: set LOCKRUN_REDIS_PASSWORD, \
             --redis-password-file, or one in the URL"
                .into(),
        );
    }
    // Nagle would hold back a request written while an earlier one is unacknowledged;
    // every request here is latency-bound. Keepalive probes after 10 s of silence (three, 5 s
    // apart): a connection that only listens (a waiter's or a standby's wake-up subscription,
    // for the whole job) then learns within about 25 s that its server is gone without a word
    // (a host lost, a NAT that forgot it) and subscribes again, and a NAT or load balancer that
    // drops idle connections sees traffic; without them such a subscription would wait, deaf,
    // for its next look.
    let keepalive = socket2::TcpKeepalive::new()
        .with_time(std::time::Duration::from_secs(10))
        .with_interval(std::time::Duration::from_secs(5))
        .with_retries(3);
    let tcp = redis::io::tcp::TcpSettings::default()
        .set_nodelay(true)
        .set_keepalive(keepalive);
    let info = info.set_redis_settings(settings).set_tcp_settings(tcp);
    Ok(Target {
        info,
        shown,
        secrets,
    })
}

/// `url` cut into what redaction needs. Only URLs where every cut is unambiguous get this far.
struct Parts<'a> {
    scheme: &'a str,
    /// TCP schemes: what precedes the last `@` (contains no `@`, `/`, `?`, `#`).
    userinfo: Option<&'a str>,
    /// Host, port and path: everything up to the query or fragment.
    location: &'a str,
    query: Option<&'a str>,
    fragment: Option<&'a str>,
}

/// Cuts a URL into parts, or refuses it with a message that quotes none of it (at most the
/// scheme): a URL that is refused here is one where we cannot tell which part is the password.
///
/// For TCP schemes the user info ends at the *last* `@` (a host, port or `/db` never contains
/// one); if what precedes it holds another `@`, or a `/`, `?` or `#` (which end the authority
/// for a URL parser), the password was written unencoded and the parser would take part of it
/// for the host, path or query. For unix schemes user info is not used at all, so anything
/// between `//` and the path other than `localhost` is refused (it may be a password, and the
/// socket path itself may legitimately contain `@`).
fn split(url: &str) -> Result<Parts<'_>, String> {
    // Read as part of the scheme, it would be called an unsupported one.
    if url.starts_with(char::is_whitespace) {
        return Err(format!(
            "{INVALID}: it begins with a space or another blank (URL not shown)"
        ));
    }
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(format!(
            "{INVALID}: expected redis://[user:password@]host[:port][/db], rediss://…, or \
             unix:///path/to/redis.sock[?pass=…] (not shown: it may hold a password)"
        ));
    };
    let tcp = TCP_SCHEMES.contains(&scheme);
    if !tcp && !UNIX_SCHEMES.contains(&scheme) {
        let scheme = if scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
        {
            format!(" '{scheme}://'")
        } else {
            String::new()
        };
        return Err(format!(
            "{INVALID}: unsupported scheme{scheme}; use redis://, rediss://, valkey://, \
             valkeys://, unix://, redis+unix://, redis+sentinel://, rediss+sentinel://, \
             redis+cluster:// or rediss+cluster://"
        ));
    }
    let (userinfo, rest) = if tcp {
        match rest.rfind('@') {
            Some(at) if rest[..at].contains(['@', '/', '?', '#']) => {
                return Err(format!(
                    "{INVALID}: cannot tell where its user name or password ends (an \
                     unencoded '@', '/', '?' or '#' in it?); {ENCODE_HINT} (URL not shown)"
                ));
            }
            Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
            None => (None, rest),
        }
    } else {
        let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
        if !authority.is_empty() && !authority.eq_ignore_ascii_case("localhost") {
            return Err(format!(
                "{INVALID}: a unix socket URL has nothing between '//' and the path \
                 (unix:///path/to/redis.sock); give credentials as ?user=…&pass=… \
                 (percent-encoded) or with --redis-user and LOCKRUN_REDIS_PASSWORD or \
                 --redis-password-file (URL not shown)"
            ));
        }
        (None, rest)
    };
    let (rest, fragment) = match rest.split_once('#') {
        Some((r, f)) => (r, Some(f)),
        None => (rest, None),
    };
    let (location, query) = match rest.split_once('?') {
        Some((l, q)) => (l, Some(q)),
        None => (rest, None),
    };
    Ok(Parts {
        scheme,
        userinfo,
        location,
        query,
        fragment,
    })
}

impl Parts<'_> {
    /// `user:***@` keeps the user name (it tells which ACL user failed); a lone `secret@` is
    /// all hidden, since people put a password there believing it is one. Query values are
    /// hidden unless known harmless; a fragment other than `#insecure` (the only one redis-rs
    /// reads) is hidden, as it may be the tail of a password with an unencoded `#`.
    fn redacted(&self) -> String {
        let mut out = format!("{}://", self.scheme);
        if let Some(userinfo) = self.userinfo {
            match userinfo.split_once(':') {
                Some((user, _)) => out += &format!("{user}:***@"),
                None if userinfo.is_empty() => out += "@",
                None => out += "***@",
            }
        }
        out += self.location;
        if let Some(query) = self.query {
            let items: Vec<String> = query
                .split('&')
                .map(|item| match item.split_once('=') {
                    Some((name, _)) if HARMLESS_PARAMS.contains(&param_name(name).as_str()) => {
                        item.to_string()
                    }
                    Some((name, _)) => format!("{name}=***"),
                    None if item.is_empty() => String::new(),
                    None => "***".to_string(),
                })
                .collect();
            out += "?";
            out += &items.join("&");
        }
        if let Some(fragment) = self.fragment {
            out += if fragment == "insecure" {
                "#insecure"
            } else {
                "#***"
            };
        }
        out
    }

    /// The raw passwords in the URL, to scrub from messages: the user-info password (or a
    /// lone user-info part, see `redacted`), and the password query parameters.
    fn secrets(&self) -> Vec<&str> {
        let mut out = Vec::new();
        if let Some(userinfo) = self.userinfo {
            out.push(userinfo.split_once(':').map_or(userinfo, |(_, p)| p));
        }
        for item in self.query.unwrap_or("").split('&') {
            if let Some((name, value)) = item.split_once('=') {
                if PASSWORD_PARAMS.contains(&param_name(name).as_str()) {
                    out.push(value);
                }
            }
        }
        out.retain(|s| !s.is_empty());
        out
    }
}

/// A query parameter's name as redis-rs sees it (`p%61ss` is `pass`).
fn param_name(raw: &str) -> String {
    percent_decode(raw, true)
}

/// `%XX` → byte, and with `plus_is_space` (form encoding, as in a query) `+` → space. Invalid
/// escapes stay as they are, like the `url` crate does. Lossy for non-UTF-8 results: only used
/// to find a secret in a message, which is text anyway.
fn percent_decode(s: &str, plus_is_space: bool) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |at: usize| bytes.get(at).and_then(|&b| (b as char).to_digit(16));
        match (bytes[i], hex(i + 1), hex(i + 2)) {
            (b'%', Some(hi), Some(lo)) => {
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            (b'+', _, _) if plus_is_space => {
                out.push(b' ');
                i += 1;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A TCP URL's user info, location (host, port, path) and query, cut by the same rules as
/// [`target`] (an ambiguous one is refused without quoting it).
pub fn authority_parts(url: &str) -> Result<(Option<&str>, &str, Option<&str>), String> {
    let p = split(url)?;
    Ok((p.userinfo, p.location, p.query))
}

/// `redis://user:secret@host` → `redis://user:***@host`, `?pass=secret` → `?pass=***`; a URL
/// that cannot be cut unambiguously is not shown at all.
pub fn redact_url(url: &str) -> String {
    split(url).map_or_else(|_| "(URL not shown)".to_string(), |p| p.redacted())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(url: &str) -> String {
        target(url, &Credentials::default())
            .map(|t| t.shown)
            .unwrap_or_else(|e| panic!("{url}: {e}"))
    }

    #[test]
    fn a_tcp_url_names_its_database_in_the_path_only() {
        let creds = Credentials::default();
        for url in ["redis://h/2?db=3", "redis://h?db=3", "rediss://h:1/0?db=0"] {
            let err = target(url, &creds)
                .err()
                .unwrap_or_else(|| panic!("{url} accepted"));
            assert!(
                err.contains("names its database in the path"),
                "{url}: {err}"
            );
        }
        assert!(target("redis://h/2", &creds).is_ok());
        assert!(target("unix:///s.sock?db=3", &creds).is_ok());
    }

    #[test]
    fn redaction_of_user_info() {
        assert_eq!(shown("redis://:hunter2@h:6379/0"), "redis://:***@h:6379/0");
        assert_eq!(shown("redis://u:hunter2@h"), "redis://u:***@h");
        assert_eq!(shown("rediss://secret@h"), "rediss://***@h");
        assert_eq!(shown("redis://h:6379"), "redis://h:6379");
        assert_eq!(shown("redis://@h"), "redis://@h");
        assert_eq!(shown("rediss://h#insecure"), "rediss://h#insecure");
        assert_eq!(shown("unix:///tmp/r.sock"), "unix:///tmp/r.sock");
        // `@` in a socket path is just a path.
        assert_eq!(shown("unix:///run/a@b/r.sock"), "unix:///run/a@b/r.sock");
        assert_eq!(redact_url("not a url"), "(URL not shown)");
    }

    #[test]
    fn redaction_of_query_credentials() {
        assert_eq!(
            shown("redis+unix:///var/run/redis.sock?pass=TopSecret42"),
            "redis+unix:///var/run/redis.sock?pass=***"
        );
        assert_eq!(
            shown("unix:///s?db=2&user=alice&pass=x&protocol=resp3"),
            "unix:///s?db=2&user=***&pass=***&protocol=resp3"
        );
        // An unencoded `&` or `#` in the password spills into another parameter or the
        // fragment: hidden too.
        assert_eq!(shown("unix:///s?pass=ab&cd"), "unix:///s?pass=***&***");
        assert_eq!(shown("unix:///s?pass=ab#cd"), "unix:///s?pass=***#***");
        assert_eq!(
            shown("unix:///s?p%61ss=x&db=1"),
            "unix:///s?p%61ss=***&db=1"
        );
        assert_eq!(
            shown("redis://h/0?password=x&protocol=2"),
            "redis://h/0?password=***&protocol=2"
        );
    }

    #[test]
    fn ambiguous_urls_are_refused_without_echoing_them() {
        for url in [
            "redis://:Kq@Zw:w/Jx%41@127.0.0.1:6379",
            "redis://u:Kq@Zw@h",
            "redis://:Kq/Zw@h",
            "redis://:Kq?Zw@h",
            "rediss://:Kq#Zw@h",
            "unix://:Kq@localhost/tmp/r.sock",
            "unix://:Kq/Zw@localhost/tmp/r.sock",
            ":Kq@host",
            "ftp://:Kq@h",
            "not a url Kq",
        ] {
            let err = target(url, &Credentials::default()).err().unwrap();
            assert!(err.starts_with("invalid Redis URL"), "{url}: {err}");
            for part in ["Kq", "Zw", "Jx"] {
                assert!(!err.contains(part), "{url}: {err}");
            }
            assert_eq!(redact_url(url), "(URL not shown)", "{url}");
        }
        let err = target("redis://:a@b@h", &Credentials::default())
            .err()
            .unwrap();
        assert!(err.contains("%40") && err.contains("%2F"), "{err}");
        // Encoded, the same password is fine, and decoded for the server.
        let t = target("redis://:p%40ss:w%2Frd%2541@h", &Credentials::default()).unwrap();
        assert_eq!(t.info.redis_settings().password(), Some("p@ss:w/rd%41"));
        assert_eq!(t.shown, "redis://:***@h");
    }

    #[test]
    fn bad_urls_never_echo_the_password() {
        for url in [
            "ftp://:hunter2@h",
            "redis://:hunter2@h:notaport",
            "redis://:hunter2@",
            "redis://:hunter2@h/notadb",
            "unix:///s?pass=hunter2&db=x",
            "redis://:hunter2@0.0.0.0",
        ] {
            let err = target(url, &Credentials::default()).err().unwrap();
            assert!(!err.contains("hunter2"), "{err}");
        }
    }

    #[test]
    fn bad_urls_say_what_is_wrong_in_lockruns_words() {
        for (url, why) in [
            ("redis://h:99999", "invalid port number"),
            ("redis://:pw@h:abc", "invalid port number"),
            ("redis://h/a/b", "invalid database number"),
            (
                "redis://h/?protocol=resp9",
                "invalid protocol version: resp9",
            ),
            ("redis://", "missing hostname"),
            (" redis://h", "begins with a space"),
            ("\tredis://h", "begins with a space or another blank"),
        ] {
            let err = target(url, &Credentials::default()).err().unwrap();
            assert!(err.starts_with(INVALID), "{url}: {err}");
            assert!(err.contains(why), "{url}: {err}");
            // redis-rs's name for the kind of error means nothing to the reader.
            assert!(!err.contains("InvalidClientConfig"), "{url}: {err}");
        }
    }

    #[test]
    fn scrubbing_covers_decoded_forms() {
        let t = target("redis://:p%40ss+w@h", &Credentials::default()).unwrap();
        for msg in ["p%40ss+w", "p@ss+w", "p@ss w"] {
            assert_eq!(t.secrets.scrub(&format!("x {msg} y")), "x *** y", "{msg}");
        }
        let t = target("unix:///s?pass=a%2Bb+c", &Credentials::default()).unwrap();
        assert_eq!(t.info.redis_settings().password(), Some("a+b c"));
        assert_eq!(t.secrets.scrub("got a+b c"), "got ***");
        assert_eq!(t.secrets.scrub("got a%2Bb+c"), "got ***");
        assert_eq!(percent_decode("%zz%4", false), "%zz%4");
    }

    #[test]
    fn credentials_override_the_url_and_are_scrubbed() {
        let creds = Credentials {
            user: Some("acl".into()),
            password: Some("from-env".into()),
        };
        let t = target("redis://u:from-url@h", &creds).unwrap();
        let s = t.info.redis_settings();
        assert_eq!(
            (s.username(), s.password()),
            (Some("acl"), Some("from-env"))
        );
        assert_eq!(t.secrets.scrub("from-env from-url"), "*** ***");
        // A user name alone would be ignored by redis-rs: refused.
        let creds = Credentials {
            user: Some("acl".into()),
            password: None,
        };
        assert!(target("redis://h", &creds).is_err());
        assert!(format!(
            "{:?}",
            Credentials {
                user: None,
                password: Some("dbg-secret".into())
            }
        )
        .contains("***"));
    }

    #[test]
    fn password_files() {
        let dir = tempfile::tempdir().unwrap();
        let file = |name: &str, content: &[u8]| {
            let p = dir.path().join(name);
            std::fs::write(&p, content).unwrap();
            p
        };
        let read = |p: &Path| Credentials::from_options(None, None, Some(p)).map(|c| c.password);
        assert_eq!(read(&file("a", b"pw\n")), Ok(Some("pw".into())));
        assert_eq!(read(&file("b", b"pw\r\n")), Ok(Some("pw".into())));
        assert_eq!(read(&file("c", b"pw\n\n")), Ok(Some("pw\n".into())));
        assert_eq!(read(&file("d", b"pw")), Ok(Some("pw".into())));
        for (name, content) in [("e", &b""[..]), ("f", b"\n"), ("g", b"s3\xffcret")] {
            let err = read(&file(name, content)).unwrap_err();
            assert!(err.contains(&format!("/{name}'")), "{err}");
            assert!(!err.contains("s3"), "{err}");
        }
        assert!(read(&dir.path().join("missing")).is_err());
        // Both sources, or neither.
        let both = Credentials::from_options(None, Some("x".into()), Some(&file("h", b"y")));
        assert!(both.is_err());
        let env = Credentials::from_options(None, Some("".into()), None).unwrap();
        assert_eq!(env.password, None);
    }
}
