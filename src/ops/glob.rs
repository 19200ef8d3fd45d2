//! Redis' glob patterns (`SCAN MATCH`, `KEYS`): `*`, `?`, `[abc]`, `[^a-z]`, `\x`. `list` scans
//! lockrun's own fencing counters and matches the lock names inside them here, so a pattern
//! means the same as in `redis-cli --scan --pattern` over the lock names themselves.

pub fn matches(pattern: &str, name: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let s: Vec<char> = name.chars().collect();
    at(&p, &s)
}

fn at(p: &[char], s: &[char]) -> bool {
    match p.first() {
        None => s.is_empty(),
        // Collapse runs of `*`, then try every split: names are short, patterns shorter.
        Some('*') => {
            let rest = &p[p.iter().take_while(|&&c| c == '*').count()..];
            (0..=s.len()).any(|i| at(rest, &s[i..]))
        }
        Some('?') => !s.is_empty() && at(&p[1..], &s[1..]),
        Some('[') => {
            let Some(&c) = s.first() else { return false };
            match class(&p[1..], c) {
                Some((hit, used)) => hit && at(&p[1 + used..], &s[1..]),
                // An unclosed `[` is a literal, as in Redis.
                None => c == '[' && at(&p[1..], &s[1..]),
            }
        }
        Some('\\') if p.len() > 1 => s.first() == Some(&p[1]) && at(&p[2..], &s[1..]),
        Some(&c) => s.first() == Some(&c) && at(&p[1..], &s[1..]),
    }
}

/// A `[...]` class after its `[`: whether `c` is in it, and how many pattern characters it
/// took (through the `]`); `None` when there is no closing `]`.
fn class(p: &[char], c: char) -> Option<(bool, usize)> {
    let (negate, mut i) = if p.first() == Some(&'^') {
        (true, 1)
    } else {
        (false, 0)
    };
    let mut hit = false;
    while i < p.len() {
        match p[i] {
            ']' => return Some((hit != negate, i + 1)),
            '\\' if i + 1 < p.len() => {
                hit |= p[i + 1] == c;
                i += 2;
            }
            lo if i + 2 < p.len() && p[i + 1] == '-' && p[i + 2] != ']' => {
                let (a, b) = if lo <= p[i + 2] {
                    (lo, p[i + 2])
                } else {
                    (p[i + 2], lo)
                };
                hit |= (a..=b).contains(&c);
                i += 3;
            }
            other => {
                hit |= other == c;
                i += 1;
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn redis_glob_rules() {
        assert!(matches("*", ""));
        assert!(matches("*", "anything"));
        assert!(matches("night*", "nightly"));
        assert!(!matches("night*", "a-nightly"));
        assert!(matches("*ly", "nightly"));
        assert!(matches("h?llo", "hello"));
        assert!(!matches("h?llo", "hllo"));
        assert!(matches("h[ae]llo", "hallo"));
        assert!(!matches("h[ae]llo", "hillo"));
        assert!(matches("h[^e]llo", "hallo"));
        assert!(!matches("h[^e]llo", "hello"));
        assert!(matches("h[a-c]llo", "hbllo"));
        assert!(matches("h[c-a]llo", "hbllo"));
        assert!(matches("a\\*b", "a*b"));
        assert!(!matches("a\\*b", "axb"));
        assert!(matches("job:{*}:x", "job:{tenant}:x"));
        assert!(matches("a[b", "a[b"));
        assert!(matches("**a**", "xxaxx"));
        assert!(matches("deploy-*-prod", "deploy-eu-prod"));
    }
}
