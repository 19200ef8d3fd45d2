//! A server whose wall clock is off, and can be stepped while it runs (`clockshim.c`, loaded
//! with `LD_PRELOAD`): Redis expires keys by its wall clock, so a clock stepped forward ends
//! leases early there. Only `CLOCK_REALTIME` (and `gettimeofday`, `time`) move; the monotonic
//! clock stays the machine's.
//!
//! ```ignore
//! let clock = Clock::new(0);
//! let redis = Server::with(ServerOptions { env: clock.env(), ..ServerOptions::default() });
//! clock.step_to(5_000);                     // the server's clock now reads 5 s ahead
//! assert_offset(&redis.cmd(&["TIME"]), 5_000);
//! ```
//!
//! The library is compiled once per test binary (`cc -shared -fPIC`) into the target
//! directory; a missing C compiler fails the test with what to install (it never skips).
//!
//! A clock that runs at another *rate* is libfaketime's ([`slowed`]): for lockrun (and cron),
//! which libfaketime does not hang.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

/// The environment variable that names the offset file (read by `clockshim.c`).
pub const FILE_VAR: &str = "LOCKRUN_CLOCKSHIM_FILE";

/// The shim, built on first use (once per test binary, into its own file, so that test
/// binaries running at once never load a half-written one).
pub fn library() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/clockshim.c");
        let out = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("clockshim-{}.so", std::process::id()));
        let built = Command::new("cc")
            .args(["-shared", "-fPIC", "-O2", "-Wall", "-o"])
            .arg(&out)
            .arg(&src)
            .output()
            .unwrap_or_else(|e| {
                panic!("the clock tests need a C compiler (apt-get install gcc): cc: {e}")
            });
        assert!(
            built.status.success(),
            "cc {}: {}",
            src.display(),
            String::from_utf8_lossy(&built.stderr)
        );
        out
    })
}

/// One offset file, shared by every process started with [`Clock::env`]; dropped with it.
pub struct Clock {
    dir: tempfile::TempDir,
}

impl Clock {
    /// A clock `offset_ms` ahead of the machine's (negative: behind).
    pub fn new(offset_ms: i64) -> Clock {
        let clock = Clock {
            dir: tempfile::tempdir().expect("tempdir"),
        };
        clock.step_to(offset_ms);
        clock
    }

    pub fn file(&self) -> PathBuf {
        self.dir.path().join("offset_ms")
    }

    /// `LD_PRELOAD` and the offset file, for a server's environment.
    pub fn env(&self) -> Vec<(String, OsString)> {
        vec![
            ("LD_PRELOAD".into(), library().as_os_str().to_owned()),
            (FILE_VAR.into(), self.file().into_os_string()),
        ]
    }

    /// Steps the clock to `offset_ms` from the machine's: at once, for every process using it
    /// (written in place: the shim keeps the file open, and reads an empty file as "no change").
    pub fn step_to(&self, offset_ms: i64) {
        std::fs::write(self.file(), format!("{offset_ms}\n")).expect("write the clock offset");
    }
}

/// libfaketime (`LOCKRUN_TEST_LIBFAKETIME`, else `/usr/lib/*/faketime/libfaketime.so.1`); its
/// absence fails the test with what to install.
pub fn libfaketime() -> PathBuf {
    std::env::var_os("LOCKRUN_TEST_LIBFAKETIME")
        .map(PathBuf::from)
        .or_else(|| {
            std::fs::read_dir("/usr/lib")
                .ok()?
                .flatten()
                .map(|d| d.path().join("faketime/libfaketime.so.1"))
                .find(|p| p.is_file())
        })
        .filter(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "libfaketime.so.1 not found under /usr/lib/*/faketime/: the clock tests need it. \
                 `bash tests/ensure-cron.sh` installs it (Debian/Ubuntu: apt-get install \
                 libfaketime), or point LOCKRUN_TEST_LIBFAKETIME at the library"
            )
        })
}

/// The environment of a process whose clocks all run at `rate` of real time (`"0.5"`: half
/// speed), from its start: the monotonic clock too (libfaketime scales it unless
/// `FAKETIME_DONT_FAKE_MONOTONIC` is set, which this removes), and its sleeps last `1/rate`
/// as long. Children inherit it.
pub fn slowed(cmd: &mut Command, rate: &str) {
    cmd.env("LD_PRELOAD", libfaketime())
        .env("FAKETIME", format!("+0 x{rate}"))
        .env_remove("FAKETIME_DONT_FAKE_MONOTONIC");
}

/// The machine's wall clock in milliseconds since the epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// The offset of a server's clock from the machine's, from its reply to `TIME` ([seconds,
/// microseconds]), to within the round trip.
pub fn offset_of(time: &[String]) -> i64 {
    let secs: i64 = time[0].parse().expect("TIME seconds");
    let micros: i64 = time[1].parse().expect("TIME microseconds");
    secs * 1000 + micros / 1000 - now_ms()
}

/// Fails unless a server's `TIME` reply is `want_ms` off the machine's clock (±250 ms).
pub fn assert_offset(time: &[String], want_ms: i64) {
    let got = offset_of(time);
    assert!(
        (got - want_ms).abs() < 250,
        "the server's clock is {got} ms off, the shim should make it {want_ms} ms"
    );
}
