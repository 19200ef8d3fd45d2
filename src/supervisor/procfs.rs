//! What the supervisor reads of /proc: whether it is this PID namespace's own, and the job's
//! processes it lists (members of a group, adopted orphans) with their state.

use nix::errno::Errno;
use tracing::debug;

/// Whether /proc is this PID namespace's own: /proc/self names this process by its pid here.
/// The /proc of another namespace (the host's, in a namespace that did not mount its own)
/// names it by another pid, or not at all; an empty or absent /proc has no /proc/self.
pub(super) fn proc_is_ours() -> bool {
    let link = std::fs::read_link("/proc/self");
    let ours = link
        .as_ref()
        .ok()
        .and_then(|l| l.to_str()?.parse::<u32>().ok())
        == Some(std::process::id());
    if !ours {
        debug!(proc_self = ?link, "/proc is not this PID namespace's own: the job's liveness is the kernel's answer alone");
    }
    ours
}

/// What the supervisor reads of a process in `/proc/<pid>/stat`.
struct ProcStat {
    pid: i32,
    /// One letter: `R`, `S`, `D`, `T`, `Z` (zombie), `X` (dead)...
    state: String,
    ppid: i32,
    pgrp: i32,
}

impl ProcStat {
    /// `"pid (comm) state ppid pgrp ..."`: parsed from the last ')', as comm may hold anything
    /// (spaces and parentheses included).
    fn parse(pid: i32, stat: &str) -> Option<ProcStat> {
        let rest = &stat[stat.rfind(')')? + 1..];
        let mut fields = rest.split_whitespace();
        let state = fields.next()?.to_string();
        let ppid = fields.next()?.parse().ok()?;
        let pgrp = fields.next()?.parse().ok()?;
        Some(ProcStat {
            pid,
            state,
            ppid,
            pgrp,
        })
    }

    /// Not a zombie (nor dead): a process that still runs, or can.
    fn live(&self) -> bool {
        self.state != "Z" && self.state != "X"
    }
}

/// Every process /proc shows, as far as it can be read (one that ends meanwhile is skipped);
/// `None` if /proc itself cannot be read.
fn processes() -> Option<impl Iterator<Item = ProcStat>> {
    let dir = std::fs::read_dir("/proc").ok()?;
    Some(dir.flatten().filter_map(|entry| {
        let pid = entry.file_name().to_str()?.parse::<i32>().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        ProcStat::parse(pid, &stat)
    }))
}

/// lockrun's live children other than zombies and members of `group`, from /proc (this
/// namespace's own): after the command has exited, the processes it left that were re-parented
/// to lockrun (PID 1, or a subreaper) and that a signal to the group does not reach.
pub(super) fn adopted(group: Option<i32>) -> Vec<i32> {
    let me = std::process::id() as i32;
    let Some(all) = processes() else {
        return Vec::new();
    };
    all.filter(|p| p.ppid == me && p.live() && Some(p.pgrp) != group)
        .map(|p| p.pid)
        .collect()
}

/// True while the process group has a member that is not a zombie. kill(-pgid, 0) answers
/// "any member at all", but a zombie whose parent never reaps it (a container whose PID 1 does
/// not reap) would then hold the lock forever; /proc tells the two apart, when it is this PID
/// namespace's own (`proc_ours`, asked only when kill(2) finds a member). Any other /proc
/// numbers its processes differently, and an empty one lists none: then a group kill(2) still
/// reaches is taken to be alive.
pub(super) fn group_has_live_member(pgid: i32, proc_ours: impl FnOnce() -> bool) -> bool {
    // SAFETY: signal 0 only checks for existence and permission.
    if unsafe { libc::kill(-pgid, 0) } != 0 && Errno::last() == Errno::ESRCH {
        return false;
    }
    if !proc_ours() {
        return true;
    }
    let Some(mut all) = processes() else {
        return true;
    };
    all.any(|p| p.pgrp == pgid && p.live())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_is_read_past_any_command_name() {
        let p = ProcStat::parse(42, "42 (a) b (c)) S 7 42 42 0 -1 4194560").unwrap();
        assert_eq!((p.pid, p.state.as_str(), p.ppid, p.pgrp), (42, "S", 7, 42));
        assert!(p.live());
        let z = ProcStat::parse(43, "43 (sh) Z 1 40 40").unwrap();
        assert!(!z.live());
        assert!(ProcStat::parse(1, "1 no parenthesis S 0 1").is_none());
        assert!(ProcStat::parse(1, "1 (cut) S").is_none());
    }

    #[test]
    fn this_process_is_found_live_in_its_group() {
        let me = std::process::id() as i32;
        let mine = processes()
            .expect("/proc is readable")
            .find(|p| p.pid == me)
            .expect("this process is listed");
        assert!(mine.live());
        assert_eq!(mine.pgrp, nix::unistd::getpgrp().as_raw());
        assert!(group_has_live_member(mine.pgrp, proc_is_ours));
        assert!(proc_is_ours(), "the tests' /proc is their namespace's own");
    }
}
