#!/usr/bin/env bash
# Builds the lockrun that packaging ships: a release build statically linked against glibc,
# position-independent (static-pie), for this machine's target triple. Prints the binary's path
# as the last line of stdout (target/<triple>/release/lockrun); everything else goes to stderr.
#
#   bash packaging/build-static.sh                # build, check, print the path
#   bash packaging/build-static.sh --check FILE   # only check that FILE is statically linked
#
# Why static: lockrun is a wrapper run by cron every minute on many hosts, so its start-up cost is
# paid on every run, and loading and relocating libc.so and libgcc_s.so is a large share of a run
# that short (measured against the dynamic build and flock: docs/benchmarks.md). A static binary
# also runs on any Linux of its architecture, whatever its glibc (or none: Alpine, scratch).
#
# NSS: a static glibc still dlopen()s libnss_*.so modules for the lookups nsswitch.conf sends to
# them, and a module built against another glibc can crash the process. So the static build pins
# host lookups to glibc's `files` and `dns` backends, which are built into libc.a
# (`pin_host_lookups` in src/lib.rs, compiled in only with crt-static): host names resolve from
# /etc/hosts and DNS only, like in a musl build. glibc marks getaddrinfo with a link-time warning,
# "Using 'getaddrinfo' in statically linked applications requires at runtime the shared libraries
# from the glibc version used for linking"; GNU ld prints it, rust-lld (rustc's default linker on
# x86_64 Linux) does not. It is about those NSS modules, which the pinning keeps out.
#
# Position-independent (static-pie, rustc's default for crt-static; ELF type DYN without an
# interpreter): the kernel loads the binary's own code and data at a random address, like every
# other mapping. lockrun runs as root under cron and as PID 1 in containers, so address
# randomisation of its code is worth the few page faults of relocating itself at each start (the
# cost is in docs/benchmarks.md). The check below refuses a non-PIE (type EXEC) build.
#
# getrandom(2) directly (`getrandom_backend="linux_getrandom"`, for the getrandom crate behind the
# lock token's UUID): by default that crate looks the libc function up with dlsym, which a static
# binary cannot do, and falls back to opening /dev/random and /dev/urandom, which a chroot or an
# image without /dev does not have (the token could not be made). Needs Linux 3.17 or later.
#
# The plain `cargo build --release` (dynamic) keeps working for building from source.
set -euo pipefail
cd "$(dirname "$0")/.."

# Static means: no program interpreter (PT_INTERP, the dynamic loader) and no NEEDED shared
# libraries. readelf comes with binutils, which the Rust toolchain's linker (cc) needs anyway.
check_static() {
  local bin=$1 headers dynamic
  [ -f "$bin" ] || { echo "build-static.sh: $bin: no such file" >&2; return 1; }
  headers=$(LC_ALL=C readelf -h -l "$bin") || { echo "build-static.sh: $bin: not an ELF file" >&2; return 1; }
  dynamic=$(LC_ALL=C readelf -d "$bin")
  if grep -q 'INTERP' <<<"$headers" || grep -q '(NEEDED)' <<<"$dynamic"; then
    {
      echo "build-static.sh: $bin is dynamically linked, expected a static(-pie) binary:"
      grep -E 'Requesting program interpreter|\(NEEDED\)' <<<"$headers$dynamic" | sed 's/^ */  /'
      echo "  (is glibc's static libc.a installed? Debian/Ubuntu: libc6-dev; Fedora: glibc-static)"
    } >&2
    return 1
  fi
  # A static-pie is ELF type DYN (and no interpreter, checked above); a fixed-address build
  # (-C relocation-model=static) is type EXEC and gives up randomising lockrun's own code.
  if ! grep -Eq 'Type:[[:space:]]+DYN' <<<"$headers"; then
    echo "build-static.sh: $bin is not position-independent (ELF type EXEC), expected a static-pie (ELF type DYN); is -C relocation-model=static in RUSTFLAGS?" >&2
    return 1
  fi
  echo "build-static.sh: $bin: static-pie (no interpreter, no NEEDED libraries, position-independent)" >&2
}

if [ "${1:-}" = --check ]; then
  [ $# = 2 ] || { echo "usage: $0 [--check FILE]" >&2; exit 2; }
  check_static "$2"
  exit
fi
[ $# = 0 ] || { echo "usage: $0 [--check FILE]" >&2; exit 2; }

# The host's own triple, so an aarch64 machine builds an aarch64 binary.
triple=$(rustc -vV | sed -n 's/^host: //p')
[ -n "$triple" ] || { echo "build-static.sh: cannot read the host triple from 'rustc -vV'" >&2; exit 1; }
case $triple in
  *-linux-gnu*) ;;
  *) echo "build-static.sh: host $triple is not a glibc Linux target; this script builds static glibc binaries" >&2; exit 1 ;;
esac
# --target is required: with it, RUSTFLAGS apply only to the target's crates. Without it they
# also reach build scripts and proc-macro crates, which cannot be linked statically, and the
# build fails. The result goes to target/<triple>/release/, apart from the dynamic build.
echo "build-static.sh: cargo build --release --locked --target $triple (crt-static: static-pie)" >&2
RUSTFLAGS="${RUSTFLAGS:+$RUSTFLAGS }-C target-feature=+crt-static --cfg getrandom_backend=\"linux_getrandom\"" \
  cargo build --release --locked --target "$triple" --bin lockrun >&2
bin=$PWD/target/$triple/release/lockrun
check_static "$bin"
echo "$bin"
