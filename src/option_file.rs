//! The files options name for a secret or beside one (`--redis-password-file`,
//! `--sentinel-password-file`, `--tls-ca`, `--tls-cert`, `--tls-key`, `--ping-file`): one
//! reader for all, bounded in size and time, that never blocks for good whatever the path is
//! (a FIFO, a pipe from bash's process substitution, a device). What a file must hold is its
//! option's business; a reason this reader gives never quotes the content.

use std::io::Read as _;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

/// Most a file may hold: far above any real password, certificate, key or URL, and a bound on
/// what a wrong path (a device) can make lockrun read.
const MAX_FILE: u64 = 1 << 20;

/// How long a pipe may take to deliver its content (`--redis-password-file <(vault read …)`).
const PIPE_PATIENCE: Duration = Duration::from_secs(5);

/// The file's bytes, without ever blocking for good. The open is non-blocking: opening a FIFO
/// for reading otherwise waits until some process opens it for writing, possibly never, and a
/// signal handler installed with SA_RESTART restarts that open (SIGTERM would not end
/// lockrun). A FIFO nobody writes to then reads as empty at once, and is refused as such. A
/// pipe with a writer (bash's process substitution) is read until its end, for at most
/// [`PIPE_PATIENCE`]; a regular file is read at once.
pub fn read(path: &Path) -> Result<Vec<u8>, String> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| e.to_string())?;
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if meta.is_dir() {
        return Err("it is a directory".into());
    }
    let mut bytes = Vec::new();
    let mut limited = (&file).take(MAX_FILE + 1);
    let deadline = Instant::now() + PIPE_PATIENCE;
    let mut chunk = [0u8; 4096];
    loop {
        match limited.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => bytes.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            // A pipe whose writer has not written yet: wait for it, within the bound (poll(2)
            // returns on data, on the writer's end, or after the time left).
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(format!(
                        "nothing arrived within {}s (a pipe nobody writes to?)",
                        PIPE_PATIENCE.as_secs()
                    ));
                }
                let mut fds = [libc::pollfd {
                    fd: std::os::fd::AsRawFd::as_raw_fd(&file),
                    events: libc::POLLIN,
                    revents: 0,
                }];
                // SAFETY: one valid pollfd for a descriptor we own; EINTR just loops.
                unsafe { libc::poll(fds.as_mut_ptr(), 1, left.as_millis().min(1000) as i32) };
            }
            Err(e) => return Err(e.to_string()),
        }
    }
    if bytes.is_empty() && meta.file_type().is_fifo() {
        return Err("it is a FIFO or pipe that nothing was written to".into());
    }
    if bytes.len() as u64 > MAX_FILE {
        return Err(format!("larger than {} KiB", MAX_FILE / 1024));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fifo_without_a_writer_is_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("f");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let started = Instant::now();
        let why = read(&fifo).unwrap_err();
        assert!(why.contains("FIFO"), "{why}");
        assert!(started.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn a_file_is_read_whole_and_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, "pw\n").unwrap();
        assert_eq!(read(&file).unwrap(), b"pw\n");
        std::fs::write(&file, vec![b'x'; MAX_FILE as usize + 1]).unwrap();
        assert!(read(&file).unwrap_err().contains("larger than"));
        assert_eq!(read(dir.path()).unwrap_err(), "it is a directory");
        assert_eq!(read(Path::new("/dev/null")).unwrap(), b"");
    }
}
