//! The verdict of the ACL check: which commands lockrun needs, what for, and what a user's
//! permissions (as `ACL DRYRUN` or `redis.acl_check_cmd` answered them) leave it unable to
//! do. Separate because it judges a list of permissions, not a server's facts.

use super::{finding, Finding, Verdict};

/// What lockrun needs a command for, and so how bad it is to be without it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// Locking itself: `EVAL`, the commands inside the lock scripts, `SUBSCRIBE` for `--wait`.
    Lock,
    /// Recording runs (`XADD`, called with `pcall`: lockrun runs fine without it).
    History,
    /// The operators' commands (`history`, `list`), which may well use another user.
    Operator,
    /// Sending scripts by SHA-1 (`EVALSHA`): without it every script goes whole by `EVAL`
    /// (one refused request more per run).
    Speed,
}

/// The key the ACL checks are asked about (never written: `ACL DRYRUN` and
/// `redis.acl_check_cmd` only check), and a helper key of lockrun's beside it.
pub const PROBE_KEY: &str = "lockrun-doctor-probe";

/// `K`: the command is checked once with the lock key and once with a helper key; `C`: the
/// wake-up channel.
const NEEDED: &[(&str, &[&str], Need)] = &[
    ("EVAL", &["return 1", "1", "K"], Need::Lock),
    (
        "EVALSHA",
        &["e0e1f9fabfc9d4800c877a703b823ac0578ff8db", "1", "K"],
        Need::Speed,
    ),
    ("SUBSCRIBE", &["C"], Need::Lock),
    ("PUBLISH", &["C", "m"], Need::Lock),
    ("DEL", &["K"], Need::Lock),
    ("EXISTS", &["K"], Need::Lock),
    ("GET", &["K"], Need::Lock),
    ("PEXPIRE", &["K", "1000"], Need::Lock),
    ("PTTL", &["K"], Need::Lock),
    ("SET", &["K", "v"], Need::Lock),
    ("TIME", &[], Need::Lock),
    ("TYPE", &["K"], Need::Lock),
    ("ZADD", &["K", "1", "m"], Need::Lock),
    ("ZCARD", &["K"], Need::Lock),
    ("ZCOUNT", &["K", "-inf", "+inf"], Need::Lock),
    ("ZRANGE", &["K", "0", "0"], Need::Lock),
    ("ZRANGEBYSCORE", &["K", "-inf", "+inf"], Need::Lock),
    ("ZRANK", &["K", "m"], Need::Lock),
    ("ZREM", &["K", "m"], Need::Lock),
    ("ZREMRANGEBYSCORE", &["K", "-inf", "+inf"], Need::Lock),
    ("ZSCORE", &["K", "m"], Need::Lock),
    ("XADD", &["K", "*", "f", "v"], Need::History),
    ("XREVRANGE", &["K", "+", "-"], Need::Operator),
    ("SCAN", &["0"], Need::Operator),
];

/// One command line to check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AclProbe {
    pub need: Need,
    /// The command as lockrun sends it (`SPUBLISH` on a Cluster), then its arguments.
    pub line: Vec<String>,
    /// The key or channel it names, if any (for the report).
    pub on: Option<String>,
}

/// Every command line the ACL check asks about. On a Cluster the wake-up hints are sharded
/// (`SPUBLISH`/`SSUBSCRIBE`).
pub fn probes(cluster: bool, helper: &str, channel: &str) -> Vec<AclProbe> {
    let mut out = Vec::new();
    for (command, args, need) in NEEDED {
        let command = match (*command, cluster) {
            ("SUBSCRIBE", true) => "SSUBSCRIBE",
            ("PUBLISH", true) => "SPUBLISH",
            (c, _) => c,
        };
        let keys: &[&str] = if args.contains(&"K") {
            &[PROBE_KEY, helper]
        } else if args.contains(&"C") {
            &[channel]
        } else {
            &[""]
        };
        for key in keys {
            let mut line = vec![command.to_string()];
            line.extend(args.iter().map(|a| match *a {
                "K" | "C" => key.to_string(),
                a => a.to_string(),
            }));
            out.push(AclProbe {
                need: *need,
                line,
                on: (!key.is_empty()).then(|| key.to_string()),
            });
        }
    }
    out
}

/// What the ACL says about one [`AclProbe`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AclVerdict {
    Allowed,
    Denied,
    /// The server does not know the command (renamed or disabled, or too old).
    Unknown,
}

/// Check 9: The ACL verdicts: one finding per kind of need that is not met, or one `ok`.
/// `who`: `user 'NAME'`, or `this user` when ACL WHOAMI is denied; `how`: which method
/// answered (`ACL DRYRUN`, `redis.acl_check_cmd`).
pub fn acl(who: &str, answers: &[(AclProbe, AclVerdict)], how: &str) -> Vec<Finding> {
    let missing = |need: Need, verdict: AclVerdict| -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        let mut commands: Vec<&str> = answers
            .iter()
            .filter(|(p, a)| p.need == need && *a == verdict)
            .map(|(p, _)| p.line[0].as_str())
            .collect();
        commands.dedup();
        for command in commands {
            let all: Vec<&(AclProbe, AclVerdict)> = answers
                .iter()
                .filter(|(p, _)| p.line[0] == command)
                .collect();
            let bad: Vec<&(AclProbe, AclVerdict)> =
                all.iter().copied().filter(|(_, a)| *a == verdict).collect();
            if bad.len() == all.len() {
                names.push(command.to_string());
            } else {
                let on: Vec<&str> = bad.iter().filter_map(|(p, _)| p.on.as_deref()).collect();
                names.push(format!("{command} on {}", on.join(", ")));
            }
        }
        names
    };
    let mut out = Vec::new();
    let denied = missing(Need::Lock, AclVerdict::Denied);
    let unknown = missing(Need::Lock, AclVerdict::Unknown);
    if !denied.is_empty() || !unknown.is_empty() {
        let mut parts = Vec::new();
        if !denied.is_empty() {
            parts.push(format!("{who} may not run {}", denied.join(", ")));
        }
        if !unknown.is_empty() {
            parts.push(format!(
                "the server does not offer {} (renamed or disabled?)",
                unknown.join(", ")
            ));
        }
        out.push(finding(
            "acl",
            Verdict::Fail,
            format!(
                "{}: lockrun needs them to lock (docs/availability.md: ACL permissions)",
                parts.join("; ")
            ),
        ));
    }
    let history = missing(Need::History, AclVerdict::Denied);
    if !history.is_empty() {
        out.push(finding(
            "acl",
            Verdict::Warn,
            format!(
                "{who} may not run {}: runs are not recorded for lockrun history \
                 (locking works without)",
                history.join(", ")
            ),
        ));
    }
    let speed = missing(Need::Speed, AclVerdict::Denied);
    let no_speed = missing(Need::Speed, AclVerdict::Unknown);
    // Said only where EVAL is there to send the scripts instead.
    let eval = answers
        .iter()
        .all(|(p, a)| p.line[0] != "EVAL" || *a == AclVerdict::Allowed);
    if !no_speed.is_empty() && eval {
        out.push(finding(
            "acl",
            Verdict::Info,
            format!(
                "the server does not offer {} (renamed or disabled?): lockrun sends its \
                 scripts whole by EVAL instead",
                no_speed.join(", ")
            ),
        ));
    }
    if !speed.is_empty() {
        out.push(finding(
            "acl",
            Verdict::Info,
            format!(
                "{who} may not run {}: lockrun sends its scripts whole by EVAL instead (one \
                 refused request more per run; add +evalsha)",
                speed.join(", ")
            ),
        ));
    }
    let operator = missing(Need::Operator, AclVerdict::Denied);
    if !operator.is_empty() {
        out.push(finding(
            "acl",
            Verdict::Info,
            format!(
                "{who} may not run {}: lockrun history and list need them (with this \
                 user)",
                operator.join(", ")
            ),
        ));
    }
    if out.is_empty() {
        out.push(finding(
            "acl",
            Verdict::Ok,
            format!(
                "{who} may run every command lockrun uses on {PROBE_KEY} and its helper \
                 keys ({how})"
            ),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acl_probes_cover_every_command_of_the_scripts() {
        // Every command any lock script calls (src/lock/scripts/**/*.lua) is asked about, so a
        // script that starts calling a new command cannot slip past doctor.
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/lock/scripts");
        let mut called = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "lua") {
                let text = std::fs::read_to_string(&path).unwrap();
                for (_, rest) in text
                    .match_indices("call('")
                    .map(|(i, _)| text.split_at(i + 6))
                {
                    called.push(rest.split('\'').next().unwrap().to_string());
                }
            }
        }
        assert!(called.len() > 10, "{called:?}");
        let asked: Vec<&str> = NEEDED.iter().map(|(c, _, _)| *c).collect();
        for c in &called {
            assert!(asked.contains(&c.as_str()), "{c} is not checked");
        }
        let helper = "lockrun:fence:{lockrun-doctor-probe}";
        let plain = probes(false, helper, "lockrun:wake:{lockrun-doctor-probe}");
        assert!(plain.contains(&AclProbe {
            need: Need::Lock,
            line: vec!["GET".into(), helper.into()],
            on: Some(helper.into()),
        }));
        let sharded = probes(true, helper, "ch");
        assert!(sharded.iter().any(|p| p.line == ["SPUBLISH", "ch", "m"]));
        assert!(!sharded.iter().any(|p| p.line[0] == "PUBLISH"));
    }

    #[test]
    fn acl_findings_name_what_is_missing() {
        let all = probes(false, "h", "c");
        let answer = |deny: &[&str], only_on: Option<&str>| -> Vec<(AclProbe, AclVerdict)> {
            all.iter()
                .map(|p| {
                    let hit = deny.contains(&p.line[0].as_str())
                        && only_on.is_none_or(|k| p.on.as_deref() == Some(k));
                    (
                        p.clone(),
                        if hit {
                            AclVerdict::Denied
                        } else {
                            AclVerdict::Allowed
                        },
                    )
                })
                .collect()
        };
        let ok = acl("user 'u'", &answer(&[], None), "ACL DRYRUN");
        assert_eq!(ok.len(), 1);
        assert_eq!(ok[0].verdict, Verdict::Ok);
        let xadd = acl("user 'u'", &answer(&["XADD"], None), "ACL DRYRUN");
        assert_eq!(xadd[0].verdict, Verdict::Warn);
        assert!(
            xadd[0].detail.contains("may not run XADD:"),
            "{}",
            xadd[0].detail
        );
        let zadd = acl("user 'u'", &answer(&["ZADD", "SCAN"], Some("h")), "x");
        assert_eq!(zadd[0].verdict, Verdict::Fail);
        assert!(zadd[0].detail.contains("ZADD on h"), "{}", zadd[0].detail);
        let scan = acl("user 'u'", &answer(&["SCAN"], None), "x");
        assert_eq!(scan[0].verdict, Verdict::Info);
    }

    #[test]
    fn an_evalsha_the_server_does_not_offer_is_said() {
        let all = probes(false, "h", "c");
        let answers: Vec<(AclProbe, AclVerdict)> = all
            .iter()
            .map(|p| {
                let a = if p.line[0] == "EVALSHA" {
                    AclVerdict::Unknown
                } else {
                    AclVerdict::Allowed
                };
                (p.clone(), a)
            })
            .collect();
        let found = acl("user 'u'", &answers, "ACL DRYRUN");
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].verdict, Verdict::Info);
        assert!(
            found[0]
                .detail
                .starts_with("the server does not offer EVALSHA"),
            "{}",
            found[0].detail
        );
        // Without EVAL either, the failure is all there is to say.
        let neither: Vec<(AclProbe, AclVerdict)> = answers
            .iter()
            .map(|(p, a)| {
                (
                    p.clone(),
                    if p.line[0] == "EVAL" {
                        AclVerdict::Unknown
                    } else {
                        *a
                    },
                )
            })
            .collect();
        let found = acl("user 'u'", &neither, "ACL DRYRUN");
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].verdict, Verdict::Fail);
    }
}
