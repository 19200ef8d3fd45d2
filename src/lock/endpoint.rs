//! Which deployment a `--redis` URL names, checked without connecting: one server, a
//! Sentinel-managed primary, or a Cluster.
//!
//! The redis crate parses one-host URLs only, so the two multi-host forms are cut here and
//! every host becomes a one-host URL that goes through [`url::target`], the single place where
//! credentials are applied and redaction is decided:
//!
//! - `redis+sentinel://[user:pass@]h1[:p1][,h2[:p2]…]/<service>[/<db>]` (and `rediss+sentinel`):
//!   the user info is the *data nodes'* (the primary's); the sentinels' own password comes
//!   from `LOCKRUN_SENTINEL_PASSWORD` or `--sentinel-password-file`. Default port 26379.
//! - `redis+cluster://[user:pass@]h1[:p1][,h2[:p2]…]` (and `rediss+cluster`): seed nodes.
//!   Default port 6379.

use super::url::{self, Credentials, Secrets, Target, TlsFiles};
use redis::{ConnectionAddr, ConnectionInfo};

/// A URL, ready to connect.
pub struct Endpoint {
    pub shape: Shape,
    /// The URL as it may be shown (credentials replaced by `***`).
    pub shown: String,
    pub secrets: Secrets,
    /// `rediss`: TLS to every node (and to the sentinels).
    pub tls: bool,
    pub certs: Option<super::url::Certs>,
}

pub enum Shape {
    /// One server (also a unix socket).
    Node(ConnectionInfo),
    /// Ask these sentinels for the primary of `service`; connect to it as `node` says (the
    /// data nodes' credentials and database; its address is replaced by the primary's).
    Sentinel {
        sentinels: Vec<ConnectionInfo>,
        service: String,
        node: ConnectionInfo,
    },
    /// Seed nodes; the rest of the cluster is discovered.
    Cluster(Vec<ConnectionInfo>),
}

/// A server's address as the same server is written whichever way: the host lower-cased, a
/// loopback address (`localhost`, `127.x.y.z`, `::1`) as `localhost`, IPv6 brackets off, the
/// port always given; a unix socket by its path. Redlock's masters and a URL's sentinels must be
/// distinct servers (one server given twice would cast two votes), and comparing URL text let
/// `redis://h:6379`, `redis://h:6379/` and `redis://localhost:6379/0` pass for three. Names are
/// not resolved (DNS at every start, for a check of the command line): two names for one
/// address other than loopback still pass.
pub fn server_of(info: &ConnectionInfo) -> String {
    match info.addr() {
        ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
            let host = host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_ascii_lowercase();
            let loopback = host == "localhost"
                || host
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback());
            let host = if loopback {
                "localhost".to_string()
            } else {
                host
            };
            format!("{host}:{port}")
        }
        ConnectionAddr::Unix(path) => std::fs::canonicalize(path)
            .unwrap_or_else(|_| path.clone())
            .display()
            .to_string(),
        other => format!("{other:?}"),
    }
}

impl Endpoint {
    /// The servers this endpoint stands for, as [`server_of`] writes them: the node, the
    /// sentinels (one Sentinel-managed primary is whichever they name), or the seeds.
    pub fn servers(&self) -> Vec<String> {
        match &self.shape {
            Shape::Node(info) => vec![server_of(info)],
            Shape::Sentinel { sentinels, .. } => sentinels.iter().map(server_of).collect(),
            Shape::Cluster(seeds) => seeds.iter().map(server_of).collect(),
        }
    }
}

/// What the sentinels' password options gave (they are not the data nodes').
pub type SentinelPassword = Option<String>;

/// Parses `url` (any of the forms above), applies the credentials given outside it, reads the
/// TLS files, and with `insecure` turns certificate verification off for every TLS address.
pub fn parse(
    url: &str,
    creds: &Credentials,
    tls: &TlsFiles,
    sentinel_password: SentinelPassword,
    insecure: bool,
) -> Result<Endpoint, String> {
    let (scheme, rest) = url.split_once("://").unwrap_or((url, ""));
    let multi = match scheme {
        "redis+sentinel" | "rediss+sentinel" => Some(("sentinel", 26379)),
        "redis+cluster" | "rediss+cluster" => Some(("cluster", 6379)),
        _ => None,
    };
    let Some((kind, default_port)) = multi else {
        // One server: exactly what redis-rs parses.
        if sentinel_password.is_some() {
            return Err(
                "LOCKRUN_SENTINEL_PASSWORD / --sentinel-password-file need a redis+sentinel:// URL"
                    .into(),
            );
        }
        let target = url::target(url, creds)?;
        let is_tls = matches!(target.info.addr(), ConnectionAddr::TcpTls { .. });
        return finish(
            Shape::Node(target.info),
            target.shown,
            target.secrets,
            is_tls,
            tls,
            insecure,
        );
    };
    let tls_url = scheme.starts_with("rediss");
    let base = if tls_url { "rediss" } else { "redis" };
    // Cut as a one-host URL would be: the same rules decide where the user info ends.
    let one = format!("{base}://{rest}");
    let shown = url::redact_url(&one).replacen(base, scheme, 1);
    let (userinfo, location, query) = url::authority_parts(&one)?;
    let (hosts, path) = location.split_once('/').unwrap_or((location, ""));
    let form = if kind == "sentinel" {
        format!("{scheme}://[user:password@]host1:port1[,host2:port2…]/<service>[/<db>]")
    } else {
        format!("{scheme}://[user:password@]host1:port1[,host2:port2…]")
    };
    let bad = |why: &str| format!("{} '{shown}': {why}; expected {form}", url::INVALID);
    let mut addrs = Vec::new();
    for host in hosts.split(',') {
        if host.is_empty() {
            return Err(bad("an empty host in the list"));
        }
        // `[::1]:p` and `h:p` keep their port; a bare host gets the default.
        let has_port = host
            .rsplit_once(':')
            .is_some_and(|(h, p)| !h.ends_with('[') && !p.contains(']'));
        addrs.push(if has_port {
            host.to_string()
        } else {
            format!("{host}:{default_port}")
        });
    }
    let query = query.map_or(String::new(), |q| format!("?{q}"));
    let userinfo = userinfo.map_or(String::new(), |u| format!("{u}@"));
    let mut secrets = Secrets::default();
    let node = |addr: &str, db: &str, secrets: &mut Secrets| {
        let Target {
            info,
            secrets: more,
            ..
        } = url::target(&format!("{base}://{userinfo}{addr}{db}{query}"), creds)
            .map_err(|e| e.replace(&format!("{base}://"), &format!("{scheme}://")))?;
        secrets.extend(more);
        Ok::<_, String>(info)
    };
    let shape = if kind == "sentinel" {
        let mut parts = path.splitn(2, '/');
        let service = parts.next().unwrap_or_default();
        if service.is_empty() {
            return Err(bad("no service name (the name the sentinels monitor)"));
        }
        let db = match parts.next().filter(|d| !d.is_empty()) {
            Some(d) if d.parse::<u16>().is_ok() => format!("/{d}"),
            Some(_) => return Err(bad("the database after the service name is not a number")),
            None => String::new(),
        };
        let node_info = node(&addrs[0], &db, &mut secrets)?;
        let mut sentinels: Vec<ConnectionInfo> = Vec::new();
        for addr in &addrs {
            let mut target = url::target(&format!("{base}://{addr}"), &Credentials::default())?;
            if let Some(p) = &sentinel_password {
                secrets.add_secret(p);
                target.info = target
                    .info
                    .clone()
                    .set_redis_settings(target.info.redis_settings().clone().set_password(p));
            }
            // One sentinel listed twice would answer twice, and count as two of a majority.
            if let Some(same) = sentinels
                .iter()
                .find(|s| server_of(s) == server_of(&target.info))
            {
                return Err(bad(&format!(
                    "the sentinel {} is listed twice",
                    server_of(same)
                )));
            }
            sentinels.push(target.info);
        }
        Shape::Sentinel {
            sentinels,
            service: service.to_string(),
            node: node_info,
        }
    } else {
        if sentinel_password.is_some() {
            return Err(
                "LOCKRUN_SENTINEL_PASSWORD / --sentinel-password-file need a redis+sentinel:// URL"
                    .into(),
            );
        }
        if !(path.is_empty() || path == "0") {
            return Err(bad("a Cluster has no databases other than 0"));
        }
        let mut seeds = Vec::new();
        for addr in &addrs {
            seeds.push(node(addr, "", &mut secrets)?);
        }
        Shape::Cluster(seeds)
    };
    finish(shape, shown, secrets, tls_url, tls, insecure)
}

/// Loads the TLS files and marks every TLS address insecure when asked.
fn finish(
    shape: Shape,
    shown: String,
    secrets: Secrets,
    is_tls: bool,
    tls: &TlsFiles,
    insecure: bool,
) -> Result<Endpoint, String> {
    let certs = tls.load(is_tls)?;
    if insecure && !is_tls {
        return Err("--tls-insecure (LOCKRUN_TLS_INSECURE) needs a TLS URL (rediss://…)".into());
    }
    let relax = |info: ConnectionInfo| match info.addr().clone() {
        ConnectionAddr::TcpTls {
            host,
            port,
            tls_params,
            ..
        } if insecure => info.set_addr(ConnectionAddr::TcpTls {
            host,
            port,
            insecure: true,
            tls_params,
        }),
        _ => info,
    };
    let shape = match shape {
        Shape::Node(info) => Shape::Node(relax(info)),
        Shape::Sentinel {
            sentinels,
            service,
            node,
        } => Shape::Sentinel {
            sentinels: sentinels.into_iter().map(relax).collect(),
            service,
            node: relax(node),
        },
        Shape::Cluster(seeds) => Shape::Cluster(seeds.into_iter().map(relax).collect()),
    };
    Ok(Endpoint {
        shape,
        shown,
        secrets,
        tls: is_tls,
        certs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_plain(url: &str) -> Result<Endpoint, String> {
        parse(
            url,
            &Credentials::default(),
            &TlsFiles::default(),
            None,
            false,
        )
    }

    fn hostport(info: &ConnectionInfo) -> String {
        match info.addr() {
            ConnectionAddr::Tcp(h, p)
            | ConnectionAddr::TcpTls {
                host: h, port: p, ..
            } => {
                format!("{h}:{p}")
            }
            ConnectionAddr::Unix(p) => p.display().to_string(),
            other => format!("{other:?}"),
        }
    }

    #[test]
    fn sentinel_urls() {
        let e = parse_plain("redis+sentinel://app:s3cret@h1:1,h2,h3:3/mymaster/2").unwrap();
        assert_eq!(e.shown, "redis+sentinel://app:***@h1:1,h2,h3:3/mymaster/2");
        assert!(!e.tls);
        let Shape::Sentinel {
            sentinels,
            service,
            node,
        } = e.shape
        else {
            panic!("not a sentinel shape")
        };
        assert_eq!(service, "mymaster");
        let addrs: Vec<String> = sentinels.iter().map(hostport).collect();
        assert_eq!(addrs, ["h1:1", "h2:26379", "h3:3"]);
        // The URL's credentials are the data nodes', not the sentinels'.
        assert_eq!(sentinels[0].redis_settings().password(), None);
        assert_eq!(node.redis_settings().password(), Some("s3cret"));
        assert_eq!(node.redis_settings().username(), Some("app"));
        assert_eq!(node.redis_settings().db(), 2);
        assert_eq!(e.secrets.scrub("x s3cret y"), "x *** y");
    }

    #[test]
    fn the_sentinels_password_is_their_own() {
        let e = parse(
            "redis+sentinel://h1/svc",
            &Credentials::default(),
            &TlsFiles::default(),
            Some("sentinel-pw".into()),
            false,
        )
        .unwrap();
        let Shape::Sentinel {
            sentinels, node, ..
        } = e.shape
        else {
            panic!()
        };
        assert_eq!(
            sentinels[0].redis_settings().password(),
            Some("sentinel-pw")
        );
        assert_eq!(node.redis_settings().password(), None);
        assert_eq!(e.secrets.scrub("sentinel-pw"), "***");
        // Not with a URL that has no sentinels.
        for url in ["redis://h", "redis+cluster://h"] {
            let err = parse(
                url,
                &Credentials::default(),
                &TlsFiles::default(),
                Some("pw".into()),
                false,
            )
            .err()
            .unwrap();
            assert!(err.contains("need a redis+sentinel:// URL"), "{err}");
        }
    }

    #[test]
    fn cluster_urls() {
        let e = parse_plain("rediss+cluster://:pw@a:7000,b:7001,c").unwrap();
        assert!(e.tls);
        assert_eq!(e.shown, "rediss+cluster://:***@a:7000,b:7001,c");
        let Shape::Cluster(seeds) = e.shape else {
            panic!()
        };
        let addrs: Vec<String> = seeds.iter().map(hostport).collect();
        assert_eq!(addrs, ["a:7000", "b:7001", "c:6379"]);
        assert!(seeds
            .iter()
            .all(|s| matches!(s.addr(), ConnectionAddr::TcpTls { .. })));
        assert!(seeds
            .iter()
            .all(|s| s.redis_settings().password() == Some("pw")));
    }

    #[test]
    fn bad_multi_host_urls_say_what_is_expected_without_the_password() {
        for (url, why) in [
            ("redis+sentinel://u:pw@h1,h2", "no service name"),
            ("redis+sentinel://u:pw@h1,,h2/s", "an empty host"),
            ("redis+sentinel://u:pw@h1/s/x", "not a number"),
            ("redis+cluster://u:pw@h1/3", "no databases other than 0"),
            ("redis+cluster://u:p@w@h1", "cannot tell where"),
        ] {
            let err = parse_plain(url).err().unwrap();
            assert!(err.contains(why), "{url}: {err}");
            assert!(!err.contains("pw") && !err.contains("p@w"), "{url}: {err}");
        }
    }

    #[test]
    fn tls_insecure_is_applied_to_every_address_and_needs_tls() {
        let e = parse(
            "rediss+cluster://a,b",
            &Credentials::default(),
            &TlsFiles::default(),
            None,
            true,
        )
        .unwrap();
        let Shape::Cluster(seeds) = e.shape else {
            panic!()
        };
        assert!(seeds
            .iter()
            .all(|s| matches!(s.addr(), ConnectionAddr::TcpTls { insecure: true, .. })));
        let err = parse(
            "redis://a",
            &Credentials::default(),
            &TlsFiles::default(),
            None,
            true,
        )
        .err()
        .unwrap();
        assert!(
            err.contains("needs a TLS URL") && err.contains("LOCKRUN_TLS_INSECURE"),
            "{err}"
        );
    }
}
