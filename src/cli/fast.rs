//! The plain run form read without clap: `lockrun [OPTIONS] KEY [--] COMMAND [ARGS]...`.
//!
//! Why: building clap's description of the command line and matching the words against it is
//! half of the user-space instructions of a whole `lockrun -q KEY -- true` (~250k of ~515k,
//! counted with callgrind), about 0.27 ms of wall time here, where `flock -n FILE true` takes
//! ~2.4 ms in all. Every crontab line on every host pays it on every tick.
//!
//! What keeps it safe: [`parse`] returns either exactly the [`Args`] clap would build from the
//! same words and environment, field for field, or `None`, and then clap reads the line as
//! before. It declines everything but the plain forms: help and version, clusters of short
//! options other than `-vv…`, an option given twice, a value that is empty or starts with '-'
//! (clap decides whether it is a value or an option), a word before the command that is not
//! UTF-8, an operator's verb, and any value its parser refuses. So every message, and every
//! error, still comes from clap. The tests below compare the two on generated command lines and
//! environments, and check that this table knows every option and environment variable clap
//! knows.

use super::{
    parse_acks, parse_every, parse_exit_code, parse_history, parse_key, parse_limit,
    parse_min_hold, parse_switch, parse_ttl, verbs, Args, Connection, Logs, OnLost,
    DEFAULT_HISTORY, DEFAULT_KILL_AFTER, DEFAULT_TTL, DEFAULT_URL,
};
use crate::duration::{self, Wait};
use crate::exit_codes::DEFAULT_CONFLICT;
use crate::logging::Format;
use clap::ValueEnum;
use std::ffi::OsString;
use std::path::PathBuf;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    /// Takes one value; given at most once.
    Value,
    /// Takes one value; may be given again (`-r`), each adds one.
    Append,
    /// No value on the command line; its environment variable is a switch (`parse_switch`).
    Switch,
    /// No value, no environment variable; counts (`-v`, `-vv`).
    Count,
}

struct Opt {
    long: &'static str,
    short: Option<char>,
    env: Option<&'static str>,
    kind: Kind,
}

const fn opt(long: &'static str, short: Option<char>, env: &'static str, kind: Kind) -> Opt {
    Opt {
        long,
        short,
        env: Some(env),
        kind,
    }
}

use Kind::*;

/// Every option of the run form, as `Args` declares it to clap (the test
/// `the_table_matches_clap` holds the two together). The position is the index into
/// [`Parsed::given`].
#[rustfmt::skip]
const OPTS: [Opt; 26] = [
    opt("redis", Some('r'), "LOCKRUN_REDIS_URL", Append),
    opt("node-timeout", None, "LOCKRUN_NODE_TIMEOUT", Value),
    opt("redis-user", None, "LOCKRUN_REDIS_USER", Value),
    opt("redis-password-file", None, "LOCKRUN_REDIS_PASSWORD_FILE", Value),
    opt("tls-ca", None, "LOCKRUN_TLS_CA", Value),
    opt("tls-cert", None, "LOCKRUN_TLS_CERT", Value),
    opt("tls-key", None, "LOCKRUN_TLS_KEY", Value),
    opt("tls-insecure", None, "LOCKRUN_TLS_INSECURE", Switch),
    opt("sentinel-password-file", None, "LOCKRUN_SENTINEL_PASSWORD_FILE", Value),
    opt("ttl", Some('t'), "LOCKRUN_TTL", Value),
    opt("wait", Some('w'), "LOCKRUN_WAIT", Value),
    opt("conflict-exit-code", Some('E'), "LOCKRUN_CONFLICT_EXIT_CODE", Value),
    opt("kill-after", None, "LOCKRUN_KILL_AFTER", Value),
    opt("on-lost", None, "LOCKRUN_ON_LOST", Value),
    opt("every", None, "LOCKRUN_EVERY", Value),
    opt("min-hold", None, "LOCKRUN_MIN_HOLD", Value),
    opt("acks", None, "LOCKRUN_ACKS", Value),
    opt("fsync", None, "LOCKRUN_FSYNC", Switch),
    opt("history", None, "LOCKRUN_HISTORY", Value),
    opt("limit", Some('l'), "LOCKRUN_LIMIT", Value),
    opt("no-group", None, "LOCKRUN_NO_GROUP", Switch),
    opt("subreaper", None, "LOCKRUN_SUBREAPER", Switch),
    opt("metrics-file", None, "LOCKRUN_METRICS_FILE", Value),
    opt("quiet", Some('q'), "LOCKRUN_QUIET", Switch),
    Opt { long: "verbose", short: Some('v'), env: None, kind: Count },
    opt("log-format", None, "LOCKRUN_LOG_FORMAT", Value),
];

fn index(long: &str) -> usize {
    OPTS.iter()
        .position(|o| o.long == long)
        .expect("an option of the table")
}

/// What the words before KEY said.
struct Parsed<'a> {
    /// Per option of [`OPTS`]: its value on the command line (a switch: "given").
    given: [Option<&'a str>; OPTS.len()],
    redis: Vec<&'a str>,
    verbose: u8,
}

impl Parsed<'_> {
    /// An option's value: the command line's, else its environment variable's (set and not
    /// empty: `without_empty_env`), else none. `Err`: an environment value that is not UTF-8,
    /// which clap has to judge.
    fn value(&self, long: &str) -> Result<Option<String>, ()> {
        let i = index(long);
        if let Some(v) = self.given[i] {
            return Ok(Some(v.to_string()));
        }
        from_env(&OPTS[i])
    }

    /// A value through its parser, or the default's; `Err` when either refuses.
    fn parsed<T, E>(
        &self,
        long: &str,
        parser: impl Fn(&str) -> Result<T, E>,
        default: &str,
    ) -> Result<T, ()> {
        let v = self.value(long)?;
        parser(v.as_deref().unwrap_or(default)).map_err(drop)
    }

    fn optional<T, E>(
        &self,
        long: &str,
        parser: impl Fn(&str) -> Result<T, E>,
    ) -> Result<Option<T>, ()> {
        self.value(long)?
            .map(|v| parser(&v).map_err(drop))
            .transpose()
    }

    /// A switch: given on the command line is on; else its environment variable decides.
    fn switch(&self, long: &str) -> Result<bool, ()> {
        let i = index(long);
        if self.given[i].is_some() {
            return Ok(true);
        }
        match from_env(&OPTS[i])? {
            Some(v) => parse_switch(&v).map_err(drop),
            None => Ok(false),
        }
    }
}

fn from_env(opt: &Opt) -> Result<Option<String>, ()> {
    match opt.env.and_then(std::env::var_os) {
        Some(v) if v.is_empty() => Ok(None),
        Some(v) => v.into_string().map(Some).map_err(drop),
        None => Ok(None),
    }
}

/// The run form from `argv` (the program's name first), or `None`: let clap read it.
pub(super) fn parse(argv: &[OsString]) -> Option<Args> {
    let mut p = Parsed {
        given: [None; OPTS.len()],
        redis: Vec::new(),
        verbose: 0,
    };
    let mut i = 1;
    let key = loop {
        let word = argv.get(i)?.to_str()?;
        i += 1;
        let (at, inline) = if let Some(long) = word.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((name, v)) => (name, Some(v)),
                None => (long, None),
            };
            (OPTS.iter().position(|o| o.long == name)?, inline)
        } else if let Some(short) = word.strip_prefix('-') {
            let mut chars = short.chars();
            let c = chars.next()?;
            let rest = chars.as_str();
            let at = OPTS.iter().position(|o| o.short == Some(c))?;
            match OPTS[at].kind {
                // `-t5s`; `-t=5s` is declined (clap drops the '=').
                Value | Append if !rest.is_empty() && !rest.starts_with('=') => (at, Some(rest)),
                Count if rest.chars().all(|c| c == 'v') => {
                    p.verbose = p.verbose.checked_add(u8::try_from(rest.len()).ok()?)?;
                    (at, None)
                }
                _ if !rest.is_empty() => return None,
                _ => (at, None),
            }
        } else {
            break word;
        };
        match OPTS[at].kind {
            Switch | Count if inline.is_some() => return None,
            Count => p.verbose = p.verbose.checked_add(1)?,
            Switch => {
                if p.given[at].replace("").is_some() {
                    return None;
                }
            }
            kind => {
                let v = match inline {
                    Some(v) => v,
                    None => {
                        i += 1;
                        argv.get(i - 1)?.to_str()?
                    }
                };
                if v.is_empty() || v.starts_with('-') {
                    return None;
                }
                if kind == Append {
                    p.redis.push(v);
                } else if p.given[at].replace(v).is_some() {
                    return None;
                }
            }
        }
    };
    if verbs::VERBS.contains(&key) {
        return None;
    }
    let mut command = &argv[i..];
    if command.first().is_some_and(|w| w == "--") {
        command = &command[1..];
    } else if command
        .first()
        .is_some_and(|w| w.as_encoded_bytes().starts_with(b"-"))
    {
        // An option between KEY and the command: clap's to read.
        return None;
    }
    if command.is_empty() {
        return None;
    }
    // -q and -v conflict in clap, also when -q comes from LOCKRUN_QUIET.
    let quiet_env = OPTS[index("quiet")].env.and_then(std::env::var_os);
    if p.verbose > 0
        && (p.given[index("quiet")].is_some() || quiet_env.is_some_and(|v| !v.is_empty()))
    {
        return None;
    }
    build(&p, key, command).ok()
}

fn build(p: &Parsed, key: &str, command: &[OsString]) -> Result<Args, ()> {
    let redis = if p.redis.is_empty() {
        vec![p.value("redis")?.unwrap_or_else(|| DEFAULT_URL.into())]
    } else {
        p.redis.iter().map(|s| s.to_string()).collect()
    };
    let path = |long| p.optional(long, |v| Ok::<_, ()>(PathBuf::from(v)));
    let conn = Connection {
        redis,
        node_timeout: p.optional("node-timeout", duration::parse)?,
        redis_user: p.optional("redis-user", |v| Ok::<_, ()>(v.to_string()))?,
        redis_password_file: path("redis-password-file")?,
        tls_ca: path("tls-ca")?,
        tls_cert: path("tls-cert")?,
        tls_key: path("tls-key")?,
        tls_insecure: p.switch("tls-insecure")?,
        sentinel_password_file: path("sentinel-password-file")?,
    };
    // The defaults are clap's (`default_value_t` / `default_value` in cli.rs); the enums are
    // read by clap's own derived matcher, without building a command.
    let on_lost = |v: &str| OnLost::from_str(v, false);
    let log_format = |v: &str| Format::from_str(v, false);
    Ok(Args {
        conn,
        ttl: p.parsed("ttl", parse_ttl, DEFAULT_TTL)?,
        wait: p.parsed("wait", Wait::parse, "0")?,
        conflict_exit_code: p
            .optional("conflict-exit-code", parse_exit_code)?
            .unwrap_or(DEFAULT_CONFLICT),
        kill_after: p.parsed("kill-after", duration::parse, DEFAULT_KILL_AFTER)?,
        on_lost: p.optional("on-lost", on_lost)?.unwrap_or(OnLost::Terminate),
        every: p.optional("every", parse_every)?,
        min_hold: p.optional("min-hold", parse_min_hold)?,
        acks: p.optional("acks", parse_acks)?.unwrap_or(0),
        fsync: p.switch("fsync")?,
        history: p
            .optional("history", parse_history)?
            .unwrap_or(DEFAULT_HISTORY),
        limit: p.optional("limit", parse_limit)?,
        no_group: p.switch("no-group")?,
        subreaper: p.switch("subreaper")?,
        metrics_file: path("metrics-file")?,
        logs: Logs {
            quiet: p.switch("quiet")?,
            verbose: p.verbose,
            log_format: p
                .optional("log-format", log_format)?
                .unwrap_or(Format::Text),
        },
        key: parse_key(key).map_err(drop)?,
        command: command.to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::super::{parse_with_clap, Invocation, TEST_ENV};
    use super::*;
    use clap::CommandFactory;
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;

    fn words(line: &[&str]) -> Vec<OsString> {
        std::iter::once("lockrun")
            .chain(line.iter().copied())
            .map(OsString::from)
            .collect()
    }

    /// Where `fast` answers, clap must answer the same: `Some` is a promise.
    fn agree(argv: &[OsString]) -> bool {
        let Some(fast) = parse(argv) else {
            return false;
        };
        match parse_with_clap(argv.to_vec()) {
            Ok(Invocation::Run(clap)) => assert_eq!(fast, *clap, "{argv:?}"),
            other => panic!("{argv:?}: fast parsed {fast:?}, clap gave {other:?}"),
        }
        true
    }

    fn clear_env() {
        for o in &OPTS {
            if let Some(var) = o.env {
                std::env::remove_var(var);
            }
        }
    }

    /// The table and clap's definition of `Args` name the same options, the same way: an option
    /// added to one and not the other fails here (otherwise its environment variable would be
    /// ignored by the fast path).
    #[test]
    fn the_table_matches_clap() {
        use clap::ArgAction;
        let cmd = Args::command();
        let mut seen = 0;
        for a in cmd.get_arguments() {
            let Some(long) = a.get_long() else {
                assert!(a.is_positional(), "{:?} has no long name", a.get_id());
                continue;
            };
            if matches!(a.get_action(), ArgAction::Help | ArgAction::Version) {
                continue;
            }
            let o = OPTS
                .iter()
                .find(|o| o.long == long)
                .unwrap_or_else(|| panic!("--{long} is not in fast::OPTS"));
            seen += 1;
            assert_eq!(o.short, a.get_short(), "--{long}");
            assert_eq!(o.env.map(OsStr::new), a.get_env(), "--{long}");
            let kind = match a.get_action() {
                ArgAction::Set => Value,
                ArgAction::Append => Append,
                ArgAction::SetTrue => Switch,
                ArgAction::Count => Count,
                other => panic!("--{long}: {other:?}"),
            };
            assert_eq!(o.kind, kind, "--{long}");
        }
        assert_eq!(seen, OPTS.len());
    }

    /// The forms crontabs, manifests and CI scripts use take the fast path, with and without
    /// the environment; so the comparison below cannot pass by declining everything.
    #[test]
    fn plain_lines_take_the_fast_path_and_agree() {
        let _env = TEST_ENV.lock().unwrap_or_else(|e| e.into_inner());
        clear_env();
        for line in [
            &["k", "true"][..],
            &["k", "--", "true"],
            &[
                "-q",
                "-r",
                "unix:///run/redis.sock",
                "job",
                "--",
                "sh",
                "-c",
                "x",
            ],
            &[
                "--wait",
                "30m",
                "--ttl=5m",
                "-E",
                "0",
                "ci:deploy",
                "--",
                "make",
                "--",
                "-j",
            ],
            &[
                "-E0",
                "-t5s",
                "-vv",
                "-r",
                "redis://a",
                "-rredis://b",
                "-r",
                "redis://c",
                "k",
                "true",
            ],
            &[
                "--on-lost",
                "continue",
                "--log-format",
                "json",
                "--history",
                "0",
                "k",
                "x",
            ],
            &[
                "--limit",
                "3",
                "--acks=1",
                "--fsync",
                "--no-group",
                "--subreaper",
                "k",
                "x",
            ],
            &[
                "--metrics-file",
                "/m.prom",
                "--tls-ca",
                "/ca",
                "--redis-user",
                "u",
                "k",
                "x",
            ],
            &["k", "--", "--"],
            &["k", "--", "-n"],
            &["k", "echo", "--", "-n"],
        ] {
            assert!(
                agree(&words(line)),
                "{line:?} was not taken by the fast path"
            );
        }
        // Declined, or taken and the same as clap's.
        for line in [
            &["-r=redis://x", "k", "true"][..],
            &["-t=5s", "k", "true"],
            &["k", "-t", "5s", "true"],
            &["k", "-q", "--", "true"],
            &["-q", "-v", "k", "true"],
            &["--quiet=1", "k", "true"],
            &["--", "k", "true"],
            &["-", "k", "true"],
            &["k", "--"],
            &["k"],
        ] {
            agree(&words(line));
        }
        std::env::set_var("LOCKRUN_REDIS_URL", "redis://h:1");
        std::env::set_var("LOCKRUN_QUIET", "yes");
        std::env::set_var("LOCKRUN_TTL", "1m");
        std::env::set_var("LOCKRUN_WAIT", "");
        let taken = agree(&words(&["k", "true"]));
        let with_flags = agree(&words(&["-t", "2m", "-r", "redis://x", "k", "true"]));
        clear_env();
        assert!(taken && with_flags);
    }

    /// A small deterministic generator (xorshift), so a failure names a line that can be replayed.
    struct Gen(u64);

    impl Gen {
        fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % n as u64) as usize
        }

        fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
            from[self.below(from.len())]
        }
    }

    const VALUES: &[&str] = &[
        "5s",
        "500ms",
        "0",
        "1.5m",
        " 5s",
        "forever",
        "30d",
        "31d",
        "2d",
        "50ms",
        "-5s",
        "abc",
        "",
        "1",
        "75",
        "255",
        "256",
        "-1",
        " 3",
        "100",
        "101",
        "10000",
        "10001",
        "100000",
        "100001",
        "terminate",
        "continue",
        "Continue",
        "text",
        "json",
        "JSON",
        "/tmp/f",
        "rel",
        "yes",
        "no",
        "maybe",
        "redis://h:1",
        "unix:///s.sock",
        "redis://a,redis://b",
        "--",
        "-q",
        "=5s",
        "lockrun:x",
    ];

    /// A value for `o`: mostly one it accepts, sometimes any of [`VALUES`].
    fn value(g: &mut Gen, o: &Opt) -> &'static str {
        if g.below(4) == 0 {
            return g.pick(VALUES);
        }
        g.pick(match o.long {
            "redis" => &[
                "redis://h:1",
                "unix:///s.sock",
                "redis://a,redis://b,redis://c",
            ],
            "every" => &["1m", "5s", "1d", "1.5m"],
            "node-timeout" | "ttl" | "wait" | "kill-after" | "min-hold" => {
                &["5s", "500ms", "1.5m", "forever"]
            }
            "conflict-exit-code" | "acks" | "history" | "limit" => &["0", "1", "3", "75", "100"],
            "on-lost" => &["terminate", "continue"],
            "log-format" => &["text", "json"],
            "redis-user" => &["alice"],
            _ if o.kind == Switch => &["1", "0", "yes", "off", "true"],
            _ => &["/tmp/f", "rel"],
        })
    }

    /// One option as it may be written, or a word that is no option of the run form.
    fn option(g: &mut Gen) -> Vec<String> {
        let o = &OPTS[g.below(OPTS.len())];
        let v = value(g, o);
        let long = format!("--{}", o.long);
        let short = o.short.map(|c| format!("-{c}"));
        match (g.below(6), o.kind, short) {
            (0, _, _) => vec![g
                .pick(&[
                    "--help",
                    "-h",
                    "-V",
                    "--version",
                    "--",
                    "-",
                    "--bogus",
                    "-x",
                    "-vq",
                    "-qv",
                    "-vv",
                    "-vvv",
                    "--tt",
                ])
                .into()],
            (_, Switch | Count, Some(s)) if g.below(2) == 0 => vec![s],
            (1, Switch | Count, _) => vec![format!("{long}={v}")],
            (_, Switch | Count, _) => vec![long],
            (1, _, _) => vec![format!("{long}={v}")],
            (2, _, Some(s)) => vec![s, v.into()],
            (3, _, Some(s)) => vec![format!("{s}{v}")],
            _ => vec![long, v.into()],
        }
    }

    /// Generated command lines and environments: wherever the fast path answers, clap answers the
    /// same, and it answers often enough for that to mean something.
    #[test]
    fn agrees_with_clap_on_generated_lines() {
        let _env = TEST_ENV.lock().unwrap_or_else(|e| e.into_inner());
        let mut g = Gen(0x9e37_79b9_7f4a_7c15);
        let (cases, mut taken) = (4000, 0);
        for _ in 0..cases {
            clear_env();
            for o in &OPTS {
                if let (Some(var), 0) = (o.env, g.below(10)) {
                    std::env::set_var(var, value(&mut g, o));
                }
            }
            let mut line: Vec<OsString> = vec!["lockrun".into()];
            for _ in 0..g.below(4) {
                line.extend(option(&mut g).into_iter().map(OsString::from));
            }
            if g.below(8) > 0 {
                let keys = [
                    "k",
                    "job:1",
                    "ключ",
                    "k k",
                    "lockrun:x",
                    "",
                    " ",
                    "status",
                    "run",
                ];
                line.push(keys[g.below(keys.len() * 2) % keys.len()].into());
            }
            if g.below(6) == 0 {
                line.extend(option(&mut g).into_iter().map(OsString::from));
            }
            for _ in 0..g.below(4) {
                line.push(g.pick(&["true", "--", "-n", "x", "", "true"]).into());
            }
            if g.below(20) == 0 {
                let at = 1 + g.below(line.len());
                line.insert(at, OsStr::from_bytes(b"\xff-bad").to_os_string());
            }
            if agree(&line) {
                taken += 1;
            }
        }
        clear_env();
        // Each option's variable is set in a tenth of the cases, often to a value the parsers
        // refuse (then clap answers alone): every option added lowers the share, so the bar is
        // one in twenty, a few hundred lines compared.
        assert!(
            taken * 20 > cases,
            "only {taken} of {cases} lines took the fast path"
        );
    }
}
