//! The sentinels' answers to one question, counted: the primary that a majority of the listed
//! sentinels names, as soon as that many agree, or why none does (the error lockrun reports).
//! Separate from asking them (`Connector::ask_sentinels`: one connection each, all at once,
//! within a budget) because the majority rule and its errors are pure: unit-tested here, and
//! routing's fake connector counts its sentinels' answers with it.

use super::Primary;
use crate::lock::endpoint::Endpoint;
use crate::lock::failure::{At, Cause, Kind, Unsupported};
use crate::lock::redis_errors::{local_limit, refusal};
use crate::lock::LockError;
use redis::RedisError;
use std::time::Duration;

/// One sentinel's answer: the primary it names (`None`: it knows no such service) or its
/// error; `None` when it did not answer within the budget.
pub(in crate::lock) type Said = Option<Result<Option<Primary>, RedisError>>;

/// The answers to one question so far.
pub(in crate::lock) struct Votes {
    /// How many sentinels the URL lists: a majority is of these, not of those that answer.
    listed: usize,
    /// Each primary named, and by how many.
    named: Vec<(Primary, usize)>,
    /// How many know no such service.
    unknown: usize,
    /// The last error a sentinel answered with.
    last: Option<RedisError>,
}

impl Votes {
    pub(in crate::lock) fn new(listed: usize) -> Votes {
        Votes {
            listed,
            named: Vec::new(),
            unknown: 0,
            last: None,
        }
    }

    /// Counts one answer: the primary, once a majority of the listed sentinels names it.
    pub(in crate::lock) fn count(&mut self, said: Said) -> Option<Primary> {
        match said {
            Some(Ok(Some(addr))) => {
                let votes = match self.named.iter_mut().find(|(a, _)| *a == addr) {
                    Some((_, n)) => {
                        *n += 1;
                        *n
                    }
                    None => {
                        self.named.push((addr.clone(), 1));
                        1
                    }
                };
                if votes >= crate::lock::quorum(self.listed) {
                    return Some(addr);
                }
            }
            Some(Ok(None)) => self.unknown += 1,
            Some(Err(e)) => self.last = Some(e),
            None => {}
        }
        None
    }

    /// Why no majority, once every answer is in (`budget`: the time each sentinel had):
    /// sentinels that disagree, none that knows `service`, or the last error one gave.
    pub(in crate::lock) fn failure(
        self,
        endpoint: &Endpoint,
        service: &str,
        budget: Duration,
    ) -> LockError {
        let shown = &endpoint.shown;
        let server =
            |kind: Kind| LockError::on(shown, kind.scrubbed(|w| endpoint.secrets.scrub(w)));
        let sentinels = |kind: Kind| {
            let kind = kind.scrubbed(|w| endpoint.secrets.scrub(w));
            LockError::new(kind, At::Sentinels(shown.clone()))
        };
        let service = service.to_string();
        if !self.named.is_empty() {
            let names: Vec<String> = self
                .named
                .iter()
                .map(|((host, port), n)| format!("{host}:{port} ({n})"))
                .collect();
            server(Kind::Unavailable(Cause::SentinelsSplit {
                count: self.listed,
                service,
                named: names.join(", "),
            }))
        } else if self.unknown == self.listed {
            sentinels(Kind::Unsupported(Unsupported::Service(service)))
        } else {
            match self.last {
                Some(e) => match (local_limit(&e), refusal(&e, None)) {
                    // A limit of this machine, not the sentinels'.
                    (Some(limit), _) => server(Kind::Local(limit)),
                    // Authentication and ACL refusals are the sentinels' own: say whose.
                    (None, Some(refused)) => sentinels(refused),
                    (None, None) => server(Kind::Unavailable(Cause::SentinelsFailed {
                        service,
                        words: e.to_string(),
                    })),
                },
                None => server(Kind::Unavailable(Cause::SentinelsSilent(budget))),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::endpoint;
    use crate::lock::url::{Credentials, TlsFiles};

    const URL: &str = "redis+sentinel://:secret@s1:26379,s2:26379,s3:26379/mymaster";
    const SHOWN: &str = "redis+sentinel://:***@s1:26379,s2:26379,s3:26379/mymaster";

    fn sentinels() -> Endpoint {
        let (creds, tls) = (Credentials::default(), TlsFiles::default());
        endpoint::parse(URL, &creds, &tls, Some("sentinel-secret".into()), false).unwrap()
    }

    fn names(port: u16) -> Said {
        Some(Ok(Some(("10.0.0.1".into(), port))))
    }

    fn replied(line: &str) -> Said {
        let wire = format!("-{line}\r\n");
        let reply = redis::parse_redis_value(wire.as_bytes()).unwrap();
        Some(Err(reply.extract_error().unwrap_err()))
    }

    /// What `votes` says after `answers`: the primary they named, or the error's message.
    fn outcome(listed: usize, answers: Vec<Said>) -> Result<Primary, LockError> {
        let mut votes = Votes::new(listed);
        for said in answers {
            if let Some(primary) = votes.count(said) {
                return Ok(primary);
            }
        }
        Err(votes.failure(&sentinels(), "mymaster", Duration::from_millis(500)))
    }

    #[test]
    fn a_majority_of_the_listed_sentinels_names_the_primary_as_soon_as_they_agree() {
        let mut votes = Votes::new(3);
        assert_eq!(votes.count(names(1)), None);
        assert_eq!(votes.count(names(1)), Some(("10.0.0.1".into(), 1)));
        // A silent sentinel, or one naming another primary, costs nothing while two agree.
        assert_eq!(
            outcome(3, vec![None, names(2), names(1), names(1)]).ok(),
            Some(("10.0.0.1".into(), 1))
        );
        // Five listed: three must agree.
        let mut votes = Votes::new(5);
        assert_eq!(votes.count(names(1)), None);
        assert_eq!(votes.count(names(1)), None);
        assert_eq!(votes.count(names(1)), Some(("10.0.0.1".into(), 1)));
    }

    #[test]
    fn sentinels_that_disagree_are_no_majority_and_say_whom_they_name() {
        let e = outcome(3, vec![names(1), names(2), None]).unwrap_err();
        assert!(e.is_outage(), "{e}");
        assert_eq!(
            e.to_string(),
            format!(
                "Redis at {SHOWN} unavailable: no majority of the 3 sentinels of {SHOWN} names \
                 one primary for 'mymaster' (they name 10.0.0.1:1 (1), 10.0.0.1:2 (1)): a \
                 failover under way, sentinels cut off, or sentinels of another set listed \
                 under the same name"
            )
        );
        // One answer of three is no majority either: the majority is of the listed ones.
        let e = outcome(3, vec![names(1), None, None]).unwrap_err();
        assert!(e.to_string().contains("they name 10.0.0.1:1 (1))"), "{e}");
    }

    #[test]
    fn silent_sentinels_are_unavailable_within_their_budget() {
        let e = outcome(3, vec![None, None, None]).unwrap_err();
        assert!(e.is_outage(), "{e}");
        assert_eq!(
            e.to_string(),
            format!("Redis at {SHOWN} unavailable: no sentinel of {SHOWN} answered within 500ms")
        );
    }

    #[test]
    fn a_service_no_sentinel_knows_is_named() {
        let e = outcome(3, vec![Some(Ok(None)), Some(Ok(None)), Some(Ok(None))]).unwrap_err();
        assert!(e.is_refusal(), "{e}");
        assert_eq!(e.at, At::Sentinels(SHOWN.into()));
        assert_eq!(
            e.to_string(),
            format!(
                "the sentinels of {SHOWN} know no primary named 'mymaster' (the name in \
                 `sentinel monitor <name>`)"
            )
        );
    }

    #[test]
    fn the_sentinels_own_refusal_is_theirs_and_other_errors_are_an_outage() {
        let wrong = replied("WRONGPASS invalid username-password pair or user is disabled.");
        let e = outcome(3, vec![wrong, None, None]).unwrap_err();
        assert!(e.is_refusal(), "{e}");
        assert_eq!(e.at, At::Sentinels(SHOWN.into()));
        let said = e.to_string();
        assert!(said.contains("LOCKRUN_SENTINEL_PASSWORD"), "{said}");
        assert!(!said.contains("secret"), "{said}");
        let e = outcome(3, vec![replied("ERR something odd"), None, None]).unwrap_err();
        assert!(e.is_outage(), "{e}");
        assert!(
            e.to_string()
                .contains("no sentinel of redis+sentinel://:***@s1:26379,s2:26379,s3:26379/mymaster named a primary for 'mymaster': "),
            "{e}"
        );
    }
}
