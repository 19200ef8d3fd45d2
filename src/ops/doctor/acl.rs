//! The ACL check's questions: whether the user may run every command lockrun needs, asked by
//! `ACL DRYRUN` or else by `redis.acl_check_cmd` in a script (the verdict is
//! `checks::acl`). Separate because it is the one check with two ways of asking.

use super::ask::{answer, command, text};
use super::checks::{self, finding, AclVerdict, Finding, Verdict};
use crate::lock::keys::{helper_key, wake_channel};
use crate::lock::probe::ProbeReply;
use crate::lock::redis::RedisLock;
use crate::lock::LockError;
use redis::Value;

/// Checks whether the user may run every command lockrun sends or its scripts call, on a
/// sample key and a helper key beside it: by `ACL DRYRUN` (Redis 7.0+, needs ACL permission),
/// or else by `redis.acl_check_cmd` in a script, which needs nothing but EVAL, which lockrun's
/// own user has. Neither writes anything. `user`: what `ACL WHOAMI` answered, or why not.
pub(super) async fn acl(
    node: &mut RedisLock,
    at: Option<(&str, u16)>,
    user: Result<String, String>,
) -> Result<Vec<Finding>, LockError> {
    let probes = checks::probes(
        node.probes_cluster(),
        &helper_key(checks::PROBE_KEY, "fence"),
        &wake_channel(checks::PROBE_KEY),
    );
    let dryrun = match &user {
        Ok(user) => dry_run(node, at, user, &probes).await?,
        Err(why) => Err(why.clone()),
    };
    let name = user.map_or("this user".to_string(), |u| format!("user '{u}'"));
    let name = name.as_str();
    let why = match dryrun {
        Ok(answers) => return Ok(checks::acl(name, &answers, "ACL DRYRUN")),
        Err(why) => why,
    };
    match check_in_script(node, at, &probes).await? {
        Ok(answers) => Ok(checks::acl(name, &answers, "redis.acl_check_cmd")),
        Err(Some(_)) => Ok(vec![finding(
            "acl",
            Verdict::Fail,
            format!("{name} may not run EVAL: lockrun runs every lock operation as a script"),
        )]),
        Err(None) => Ok(vec![finding(
            "acl",
            Verdict::CannotCheck,
            format!("{why}, and this server has no redis.acl_check_cmd (Redis 7.0+)"),
        )]),
    }
}

/// `ACL DRYRUN <user> <command…>` for every probe, all in one round trip; `Err`: DRYRUN
/// itself cannot be asked.
async fn dry_run(
    node: &mut RedisLock,
    at: Option<(&str, u16)>,
    user: &str,
    probes: &[checks::AclProbe],
) -> Result<Result<Vec<(checks::AclProbe, AclVerdict)>, String>, LockError> {
    let cmds: Vec<redis::Cmd> = probes
        .iter()
        .map(|probe| {
            let mut args = vec!["ACL", "DRYRUN", user];
            args.extend(probe.line.iter().map(String::as_str));
            command(&args)
        })
        .collect();
    let replies = node.probe_all(&cmds, at).await?;
    let mut answers = Vec::new();
    for (probe, reply) in probes.iter().zip(replies) {
        let verdict = match reply {
            // The server knows no such command (or user): this check cannot say.
            ProbeReply::Error(e) if e.unknown => AclVerdict::Unknown,
            reply => match answer(reply, "ACL DRYRUN") {
                // "OK", or a sentence saying what is not permitted.
                Ok(Value::Okay) => AclVerdict::Allowed,
                Ok(v) if text(&v).as_deref() == Some("OK") => AclVerdict::Allowed,
                Ok(_) => AclVerdict::Denied,
                Err(e) => return Ok(Err(e)),
            },
        };
        answers.push((probe.clone(), verdict));
    }
    Ok(Ok(answers))
}

/// Asks every probe in one script (`EVAL` is not among them: running the script shows it is
/// allowed, and its key permissions are the keyed commands'). Each probe is passed as its
/// length and its words; the answer is 1 allowed, 0 denied, -1 unknown command.
const ACL_CHECK: &str = r"
if not redis.acl_check_cmd then return -1 end
local out, i = {}, 1
while i <= #ARGV do
  local n = tonumber(ARGV[i])
  local ok, allowed = pcall(redis.acl_check_cmd, unpack(ARGV, i + 1, i + n))
  if not ok then out[#out + 1] = -1 elseif allowed then out[#out + 1] = 1 else out[#out + 1] = 0 end
  i = i + n + 1
end
return out
";

/// `Err(Some(why))`: EVAL is denied; `Err(None)`: the script cannot answer (no
/// `redis.acl_check_cmd`, or it failed).
async fn check_in_script(
    node: &mut RedisLock,
    at: Option<(&str, u16)>,
    probes: &[checks::AclProbe],
) -> Result<Result<Vec<(checks::AclProbe, AclVerdict)>, Option<String>>, LockError> {
    let asked: Vec<&checks::AclProbe> = probes.iter().filter(|p| p.line[0] != "EVAL").collect();
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(ACL_CHECK).arg(0);
    for p in &asked {
        cmd.arg(p.line.len()).arg(&p.line);
    }
    let reply = match node.probe(cmd, at).await? {
        ProbeReply::Replied(Value::Array(items)) if items.len() == asked.len() => items,
        ProbeReply::Denied => return Ok(Err(Some("EVAL is denied".into()))),
        _ => return Ok(Err(None)),
    };
    let mut answers: Vec<(checks::AclProbe, AclVerdict)> = probes
        .iter()
        .filter(|p| p.line[0] == "EVAL")
        .map(|p| (p.clone(), AclVerdict::Allowed))
        .collect();
    for (p, v) in asked.into_iter().zip(reply) {
        let verdict = match v {
            Value::Int(1) => AclVerdict::Allowed,
            Value::Int(0) => AclVerdict::Denied,
            _ => AclVerdict::Unknown,
        };
        answers.push((p.clone(), verdict));
    }
    Ok(Ok(answers))
}
