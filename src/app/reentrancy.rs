//! Reentrancy: a lockrun inside the job of another lockrun of the same key runs under that
//! holder's lock. Each holder passes its key, token and fence on to its job
//! (`LOCKRUN_KEY`, `LOCKRUN_TOKEN`, `LOCKRUN_FENCE`) and, for every enclosing holder, in
//! `LOCKRUN_HELD`.

/// A nested lockrun of a key that one of its enclosing lockruns holds gets that one's token
/// and fence: the nearest's from `LOCKRUN_KEY`/`LOCKRUN_TOKEN`/`LOCKRUN_FENCE`, any other's from
/// `LOCKRUN_HELD` (so A → B → A is reentrant, not a deadlock with its own ancestor).
pub(super) fn reentrant_token(key: &str) -> Option<(String, String)> {
    let var = |name: &str| std::env::var(name).ok();
    let nearest = var("LOCKRUN_KEY").filter(|k| k == key).and_then(|_| {
        Some((
            var("LOCKRUN_TOKEN")?,
            var("LOCKRUN_FENCE").unwrap_or_default(),
        ))
    });
    let wanted = key_digest(key);
    let (token, fence) = nearest
        .or_else(|| held_entries().find_map(|e| (e.key == wanted).then_some((e.token, e.fence))))?;
    (!token.is_empty()).then_some((token, fence))
}

/// One enclosing holder in `LOCKRUN_HELD`: `<SHA-1 of the key>:<token>:<fence>`, the entries
/// comma-separated. A digest, not the key: any key is one plain word of 40 characters that way
/// (newlines and commas included), and a long key (up to 128 KiB) would not fit twice in the
/// command's environment.
struct HeldEntry {
    key: String,
    token: String,
    fence: String,
}

fn held_entries() -> impl Iterator<Item = HeldEntry> {
    let held = std::env::var("LOCKRUN_HELD").unwrap_or_default();
    let entries: Vec<HeldEntry> = held
        .split(',')
        .filter_map(|e| {
            let mut parts = e.splitn(3, ':');
            Some(HeldEntry {
                key: parts.next()?.to_string(),
                token: parts.next()?.to_string(),
                fence: parts.next().unwrap_or_default().to_string(),
            })
        })
        .collect();
    entries.into_iter()
}

/// `LOCKRUN_HELD` for the job: every enclosing holder's entry (the nearest one's
/// `LOCKRUN_KEY`/`LOCKRUN_TOKEN` too, when a job passed on only those, as the guide's
/// reentrancy section has it), then this one's. A list that would outgrow one
/// environment entry drops its oldest entries first.
pub(super) fn held_with(key: &str, token: &str, fence: u64) -> String {
    let own = key_digest(key);
    let mut entries: Vec<HeldEntry> = held_entries().filter(|e| e.key != own).collect();
    if let (Ok(k), Ok(t)) = (std::env::var("LOCKRUN_KEY"), std::env::var("LOCKRUN_TOKEN")) {
        let k = key_digest(&k);
        if k != own && !entries.iter().any(|e| e.key == k) {
            let fence = std::env::var("LOCKRUN_FENCE").unwrap_or_default();
            entries.push(HeldEntry {
                key: k,
                token: t,
                fence,
            });
        }
    }
    entries.push(HeldEntry {
        key: own,
        token: token.to_string(),
        fence: fence.to_string(),
    });
    let mut text: Vec<String> = entries
        .into_iter()
        .map(|e| format!("{}:{}:{}", e.key, e.token, e.fence))
        .collect();
    while text.iter().map(|e| e.len() + 1).sum::<usize>() > 64 * 1024 && text.len() > 1 {
        text.remove(0);
    }
    text.join(",")
}

fn key_digest(key: &str) -> String {
    crate::lock::public_id(key)
}
