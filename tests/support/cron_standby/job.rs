//! The job every host runs, and the log it writes: one line per event, read back by run.

use super::STEPS;
use std::path::{Path, PathBuf};

/// The job: one line per event, each one `printf >>` (one write(2) with O_APPEND: lines of
/// concurrent runs never interleave). It prints nothing, so cron mails nothing unless lockrun
/// itself prints.
pub fn job_script(dir: &Path, log: &Path) -> PathBuf {
    let path = dir.join("job.sh");
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\n\
             log() {{ printf '%s %s %s %s\\n' \"$1\" \"$(uname -n)\" \"$LOCKRUN_FENCE\" \"$(date +%s.%N)\" >> '{}'; }}\n\
             log start\n\
             i=0\n\
             while [ \"$i\" -lt {STEPS} ]; do sleep 1; i=$((i + 1)); log step; done\n\
             log end\n",
            log.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// One run of the job, from its lines in the job log.
#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    pub host: String,
    pub fence: u64,
    pub start: f64,
    pub steps: Vec<f64>,
    pub end: Option<f64>,
}

/// The job log: `<start|step|end> <host> <fence> <time>` lines, by run (host and fence), in
/// the order the runs started.
pub fn parse_runs(text: &str) -> Result<Vec<Run>, String> {
    let mut runs: Vec<Run> = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let [event, host, fence, t] = f[..] else {
            return Err(format!(
                "job log line {line:?}: not `event host fence time`"
            ));
        };
        let (Ok(fence), Ok(t)) = (fence.parse::<u64>(), t.parse::<f64>()) else {
            return Err(format!("job log line {line:?}: bad fence or time"));
        };
        let run = runs.iter_mut().find(|r| r.host == host && r.fence == fence);
        match (event, run) {
            ("start", None) => runs.push(Run {
                host: host.into(),
                fence,
                start: t,
                steps: Vec::new(),
                end: None,
            }),
            ("step", Some(r)) if r.end.is_none() => r.steps.push(t),
            ("end", Some(r)) if r.end.is_none() => r.end = Some(t),
            _ => return Err(format!("job log line {line:?}: out of order")),
        }
    }
    runs.sort_by(|a, b| a.start.total_cmp(&b.start));
    Ok(runs)
}
