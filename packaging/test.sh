#!/usr/bin/env bash
# Tests lockrun's packaging for real, on this machine, with nothing from an image registry:
#   - a Docker daemon of its own (dockerd started by hand, stopped by its pid at the end)
#   - a debian:bookworm-slim base image made with debootstrap (cached in target/packaging/), and
#     a local rust:1-bookworm standing in for Docker Hub's: that base + gcc, libc6-dev and the
#     host's Rust toolchain (kept in target/packaging/docker, built again when the toolchain changes)
#   - the compose scenario as the user types it, on a fresh checkout (a copy without target/):
#     from packaging/compose, docker-compose up --scale cron-service=3 --build with the classic
#     builder, so lockrun is built by packaging/Dockerfile's builder stage (crates fetched from
#     crates.io inside the container), and the replicas are checked to run that stage's binary,
#     static-pie (readelf: no interpreter, no NEEDED, type DYN; file: static-pie linked). Scaled to 3:
#     exactly one replica runs each tick, the others log "redis lock already acquired"; the key
#     expires after the tick; the job's exit code is lockrun's; docker-compose stop passes SIGTERM
#     to the running job and everything exits fast; then, with LOCKRUN_STANDBY=1, a fault each
#     tick on the replica that took it (job killed, docker stop, lockrun SIGKILLed, network cut,
#     docker pause, docker kill): another replica completes the tick, once, never beside it
#     (test-compose-standby.py)
#   - both documented uses of that image (FROM lockrun; COPY --from=lockrun), plus the binary
#     alone in a FROM scratch image
#   - lockrun built on the host as it ships: packaging/build-static.sh (static glibc,
#     position-independent); packaging/prebuilt.Dockerfile's image (the same image with that
#     binary copied in), the .deb and the .rpm carry it, each copy checked to be static
#   - the .deb (cargo deb --target <host triple> --no-build, from Cargo.toml's
#     [package.metadata.deb]) installed with dpkg -i: lockrun --version, man -w lockrun,
#     completions; the systemd units verified against it; the .rpm (cargo generate-rpm --target)
#     built and its file list checked; the lockrun inside each is the static binary
#   - the Kubernetes manifests validated offline (kubernetes-validate, in a venv under target/)
#   - packaging/check-generated.sh (man pages and completions up to date)
# Installs what it needs with apt-get (docker.io docker-compose debootstrap man-db ...).
# Fails on any missing piece; never skips. Prints timings at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
cache=$root/target/packaging
rpm_tool_version=0.21.1
mkdir -p "$cache"

# ---------------------------------------------------------------------------------------- timing
declare -a timings=()
phase_name= phase_t0=0 t_all=$(date +%s%N)
phase() {
  local now; now=$(date +%s%N)
  if [ -n "$phase_name" ]; then
    timings+=("$(awk -v n="$phase_name" -v d=$(( (now - phase_t0) / 1000000 )) 'BEGIN { printf "%7.1fs  %s", d / 1000, n }')")
  fi
  phase_name=${1:-} phase_t0=$now
  [ -z "$phase_name" ] || echo "=== $phase_name"
}
fail() { echo "FAIL: $*" >&2; exit 1; }
ok() { echo "ok: $*"; }

# ------------------------------------------------------------------------------ tools from apt
phase "tools (apt-get install when missing)"
missing=()
command -v dockerd >/dev/null || missing+=(docker.io)
command -v docker >/dev/null || missing+=(docker.io)
command -v docker-compose >/dev/null || missing+=(docker-compose)
command -v debootstrap >/dev/null || missing+=(debootstrap)
command -v man >/dev/null || missing+=(man-db)
command -v systemd-analyze >/dev/null || missing+=(systemd)
command -v rpm >/dev/null || missing+=(rpm)
command -v file >/dev/null || missing+=(file)
command -v readelf >/dev/null || missing+=(binutils)
python3 -c 'import venv, ensurepip' 2>/dev/null || missing+=(python3-venv)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  # Waits for another apt/dpkg run to finish instead of failing on its lock at once.
  apt-get update -q -o DPkg::Lock::Timeout=600
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    -o DPkg::Lock::Timeout=600 "${missing[@]}" >/dev/null
fi
for t in dockerd docker docker-compose debootstrap man systemd-analyze rpm file readelf; do
  command -v "$t" >/dev/null || fail "$t still missing after apt-get install"
done

# -------------------------------------------------------------------------- a private dockerd
phase "dockerd (private socket, data root in target/packaging/docker)"
tmp=$(mktemp -d /tmp/lockrun-pkg.XXXXXX)
dockerd_pid=
# The compose scenario runs in a fresh copy of this checkout (see there), as the user types it:
# from its packaging/compose directory, with that directory's docker-compose.yml.
checkout=$tmp/checkout
compose() { (cd "$checkout/packaging/compose" && docker-compose "$@"); }
export DOCKER_HOST="unix://$tmp/docker.sock" DOCKER_BUILDKIT=0 COMPOSE_DOCKER_CLI_BUILD=0
export COMPOSE_PROJECT_NAME=lockrunpkgtest
cleanup() {
  local rc=$?
  set +e
  if [ -n "${host_build_pid:-}" ] && kill -0 "$host_build_pid" 2>/dev/null; then
    kill -TERM -- "-$host_build_pid"
    wait "$host_build_pid" 2>/dev/null
  fi
  if [ -n "$dockerd_pid" ] && kill -0 "$dockerd_pid" 2>/dev/null; then
    if [ "$rc" != 0 ] && [ -n "${compose_up:-}" ]; then
      echo "--- docker-compose logs (failure)" >&2
      compose logs --no-color 2>&1 | tail -80 >&2
    fi
    [ -z "${compose_up:-}" ] || compose down -v --remove-orphans -t 5 >/dev/null 2>&1
    kill -TERM "$dockerd_pid"
    for _ in $(seq 150); do kill -0 "$dockerd_pid" 2>/dev/null || break; sleep 0.2; done
    if kill -0 "$dockerd_pid" 2>/dev/null; then
      echo "dockerd $dockerd_pid did not stop in 30s: SIGKILL" >&2
      kill -KILL "$dockerd_pid"
    fi
    wait "$dockerd_pid" 2>/dev/null
  fi
  [ -z "${deb_installed:-}" ] || dpkg -r lockrun >/dev/null 2>&1
  rm -rf "$tmp"
  [ "$rc" = 0 ] || echo "packaging/test.sh FAILED (exit $rc)" >&2
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
dockerd --data-root "$cache/docker" --exec-root "$tmp/exec" --pidfile "$tmp/docker.pid" \
  -H "$DOCKER_HOST" >"$tmp/dockerd.log" 2>&1 &
dockerd_pid=$!
for _ in $(seq 150); do
  docker info >/dev/null 2>&1 && break
  kill -0 "$dockerd_pid" 2>/dev/null || { tail -20 "$tmp/dockerd.log" >&2; fail "dockerd exited"; }
  sleep 0.2
done
docker info >/dev/null 2>&1 || { tail -20 "$tmp/dockerd.log" >&2; fail "dockerd did not answer in 30s"; }
ok "dockerd pid $dockerd_pid on $DOCKER_HOST ($(docker version --format '{{.Server.Version}}'))"

# ------------------------------------------------------------------ lockrun built on the host
# The binary the host packages ship (and packaging/prebuilt.Dockerfile copies): the same
# build-static.sh as in the image's builder stage, run on the host. It runs in the background
# while the images are made and the compose scenario builds lockrun in Docker (debootstrap and
# the stand-in mostly wait on the network and the disk; the last part of each release build, LTO
# with one codegen unit, uses one core), and is waited for before the timed part of the scenario.
# Its output goes to $tmp/host-build.log, shown on failure.
phase "packaging/build-static.sh: started in the background (static release build for the host triple)"
triple=$(rustc -vV | sed -n 's/^host: //p')
host_build_t0=$(date +%s%N)
# A session of its own, so that a failure elsewhere stops cargo and rustc with it (cleanup).
setsid bash packaging/build-static.sh >"$tmp/host-build.out" 2>"$tmp/host-build.log" &
host_build_pid=$!

# ------------------------------------------------- debian:bookworm-slim without a registry
phase "base image debian:bookworm-slim (debootstrap, cached tarball)"
base_tar=$cache/debian-bookworm-minbase.tar
if ! docker image inspect debian:bookworm-slim >/dev/null 2>&1; then
  if [ ! -s "$base_tar" ]; then
    echo "debootstrap --variant=minbase bookworm (once; cached in $base_tar)"
    # The Debian mirror this machine's apt uses (deb822 or one-line sources), so a machine
    # behind its own mirror builds the base image from it too.
    mirror=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '$1 == "URIs:" && $2 !~ /security/ { print $2; exit }')
    [ -n "$mirror" ] || mirror=$(awk '$1 == "deb" && $3 ~ /^bookworm$/ { print $2; exit }' /etc/apt/sources.list 2>/dev/null)
    [ -n "$mirror" ] || mirror=http://deb.debian.org/debian
    echo "mirror: $mirror"
    debootstrap --variant=minbase bookworm "$tmp/rootfs" "$mirror" >"$tmp/debootstrap.log" 2>&1 \
      || { tail -20 "$tmp/debootstrap.log" >&2; fail "debootstrap"; }
    rm -rf "$tmp/rootfs"/var/cache/apt/archives/*.deb "$tmp/rootfs"/var/lib/apt/lists/*
    tar --numeric-owner -C "$tmp/rootfs" -cf "$base_tar.part" . && mv "$base_tar.part" "$base_tar"
    rm -rf "$tmp/rootfs"
  fi
  docker import "$base_tar" debian:bookworm-slim >/dev/null
fi
ok "debian:bookworm-slim is $(docker image inspect -f '{{.Id}}' debian:bookworm-slim | cut -c1-19)"

# --------------------------------------- rust:1-bookworm without a registry (a local stand-in)
# packaging/Dockerfile builds lockrun FROM rust:1-bookworm, Docker Hub's Rust image, which cannot
# be pulled here. This builds a local image under that name that stands in for it: the bookworm
# base above; from its Debian mirror, what the builder stage uses of the real image (gcc and
# libc6-dev for the static link, binutils' readelf, ca-certificates for crates.io); and the
# host's active Rust toolchain, bin/ and lib/ of `rustc --print sysroot` (rustc, cargo, the
# standard library; not share/ with the docs, nor rust-src), at /usr/local/cargo, with CARGO_HOME
# and PATH as in the real image (which also has rustup and RUSTUP_HOME; the build uses neither).
# Also the certificates this machine adds to its trust store (/usr/local/share/ca-certificates):
# where outgoing HTTPS is re-signed by a local CA, as here, cargo in a container cannot fetch
# crates without them. Kept in the data root (target/packaging/docker), labelled with a hash of
# the toolchain's version, those certificates and this recipe; built again when one changes.
phase "rust:1-bookworm stand-in (debian:bookworm-slim + gcc + the host's $(rustc -V | cut -d' ' -f1-2))"
sysroot=$(rustc --print sysroot)
standin=$tmp/rust-standin
mkdir -p "$standin/ca"
find /usr/local/share/ca-certificates -name '*.crt' -exec cp {} "$standin/ca/" \; 2>/dev/null || true
cat >"$standin/Dockerfile" <<'EOF'
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev ca-certificates \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin
COPY ca/ /usr/local/share/ca-certificates/
RUN update-ca-certificates
COPY bin /usr/local/cargo/bin/
COPY lib /usr/local/cargo/lib/
ENV CARGO_HOME=/usr/local/cargo PATH=/usr/local/cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
EOF
standin_key=$({ rustc -vV; cargo -V; cat "$standin/Dockerfile"; find "$standin/ca" -type f -exec cat {} +; } \
  | sha256sum | cut -c1-16)
if [ "$(docker image inspect -f '{{index .Config.Labels "lockrun-test.stand-in"}}' rust:1-bookworm 2>/dev/null)" \
     != "$standin_key" ]; then
  echo "building it from $sysroot (bin/, lib/; once per toolchain)"
  # The build context as a tar on stdin: the recipe and the toolchain, nothing copied on disk.
  tar -c --exclude=lib/rustlib/src --exclude=lib/rustlib/rustc-src \
      -C "$standin" Dockerfile ca -C "$sysroot" bin lib \
    | docker build --label "lockrun-test.stand-in=$standin_key" -t rust:1-bookworm - >"$tmp/standin.log" 2>&1 \
    || { tail -30 "$tmp/standin.log" >&2; fail "building the rust:1-bookworm stand-in"; }
fi
[ "$(docker run --rm rust:1-bookworm rustc -V)" = "$(rustc -V)" ] || fail "the stand-in's rustc is not the host's"
ok "rust:1-bookworm (stand-in) is $(docker image inspect -f '{{.Id}}' rust:1-bookworm | cut -c1-19): $(rustc -V), $(docker image inspect -f '{{.Size}}' rust:1-bookworm | awk '{printf "%.0f MB", $1/1e6}')"

# Static-pie by two tools: build-static.sh's readelf check (no interpreter, no NEEDED, type DYN)
# and file(1), which says "static-pie linked" for a static position-independent binary (and
# "statically linked" for a fixed-address one, which is refused).
assert_static() {
  bash packaging/build-static.sh --check "$1" || fail "$2: not a static-pie"
  file -b "$1" | grep -q 'static-pie linked' || fail "$2: file(1) does not say static-pie linked: $(file -b "$1")"
}

# ------------------------------------------------------------------- the compose scenario
# As the user types it, on a fresh checkout: a copy of this one without target/ (nor a .env of
# one's own), and from its packaging/compose directory `docker-compose up --scale cron-service=3
# --build` (-d here, to watch it) with the classic builder (Debian's docker.io, docker-compose v1).
# cron-service is then packaging/Dockerfile's default image: lockrun built by its builder stage
# (rust:1-bookworm, the stand-in above), which fetches the crates from crates.io inside the build
# container, on dockerd's default bridge. Nothing built on the host can reach that image.
phase "compose: up -d --scale cron-service=3 --build (a fresh checkout; lockrun built in Docker)"
tick=6
unset LOCKRUN_DOCKERFILE
export TICK_SECONDS=$tick JOB_SECONDS=3 JOB_EXIT=3
mkdir "$checkout"
tar -C "$root" --exclude=./target --exclude=./.git --exclude=./packaging/compose/.env -c . | tar -C "$checkout" -x
compose down -v --remove-orphans -t 1 >/dev/null 2>&1 || true
compose_up=1
compose up -d --scale cron-service=3 --build >"$tmp/up.log" 2>&1 \
  || { tail -40 "$tmp/up.log" >&2; fail "docker-compose up"; }
# The build's output without the colour codes docker-compose puts around each chunk of stderr
# (also in the middle of a line).
sed 's/\x1b\[[0-9;]*m//g' "$tmp/up.log" >"$tmp/up.txt"
grep -E '^(Creating|Building|Starting|Recreating)|Finished .release|static-pie' "$tmp/up.txt" || true
# When the builder stage ran (not found in the cache of an earlier run), cargo fetched every crate
# from crates.io inside the build container: the stand-in has none.
if grep -q 'Finished .release' "$tmp/up.txt"; then
  crates=$(grep -c ' Downloaded [a-z]' "$tmp/up.txt" || true)
  [ "$crates" -gt 0 ] || fail "the builder stage ran but downloaded no crate"
  echo "builder stage: $crates crates downloaded from crates.io inside the build container"
else
  echo "builder stage: every step found in the cache of an earlier run"
fi
mapfile -t replicas < <(compose ps -q cron-service)
[ ${#replicas[@]} = 3 ] || fail "expected 3 cron-service containers, got ${#replicas[@]}"
for c in "${replicas[@]}"; do
  [ "$(docker inspect -f '{{.State.Running}}' "$c")" = true ] || fail "container $c is not running"
done
# lockrun's variables that the compose file passes on only when set are not set.
for c in "${replicas[@]}"; do
  docker exec "$c" sh -c '[ -z "${LOCKRUN_STANDBY+set}${LOCKRUN_TTL+set}" ]' \
    || fail "$c has LOCKRUN_STANDBY or LOCKRUN_TTL set though docker-compose's environment has neither"
done
# The replicas run the static lockrun of the builder stage. That stage's image, built again by
# docker-compose with `target: builder` (every step found in the cache of the build above, so the
# very image that build made), carries the same file.
docker cp "${replicas[0]}:/usr/local/bin/lockrun" "$tmp/compose-lockrun" >/dev/null
assert_static "$tmp/compose-lockrun" "cron-service's /usr/local/bin/lockrun"
printf 'version: "3.7"\nservices:\n  cron-service:\n    build:\n      target: builder\n    image: lockrun-test-builder\n' \
  >"$tmp/builder-stage.yml"
compose -f docker-compose.yml -f "$tmp/builder-stage.yml" build cron-service >"$tmp/builder-stage.log" 2>&1 \
  || { tail -20 "$tmp/builder-stage.log" >&2; fail "docker-compose build of the builder stage"; }
if grep -q 'Running in' "$tmp/builder-stage.log"; then
  fail "the builder stage was not in the cache of docker-compose up --build (built again)"
fi
builder_ctr=$(docker create lockrun-test-builder true)
docker cp "$builder_ctr:/usr/local/bin/lockrun" "$tmp/builder-lockrun" >/dev/null
docker rm "$builder_ctr" >/dev/null
cmp -s "$tmp/compose-lockrun" "$tmp/builder-lockrun" || fail "cron-service's lockrun is not the builder stage's"
version=$(docker run --rm lockrun-demo-cron-service --version)
[ "$version" = "lockrun $(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)" ] \
  || fail "the image's lockrun --version says '$version'"
ok "redis + 3 cron-service replicas running the builder stage's static lockrun ($version)"

# The image itself (packaging/Dockerfile's default, what `docker build -f packaging/Dockerfile -t
# lockrun .` makes), tagged lockrun for its two documented uses.
docker tag lockrun-demo-cron-service lockrun
[ "$(docker image inspect -f '{{json .Config.Entrypoint}}' lockrun)" = '["lockrun"]' ] || fail "ENTRYPOINT"
docker run --rm --entrypoint sh lockrun -c 'test -s /etc/ssl/certs/ca-certificates.crt' || fail "ca-certificates"
ok "image lockrun: ENTRYPOINT [\"lockrun\"], static lockrun, $(docker image inspect -f '{{.Size}}' lockrun | awk '{printf "%.0f MB", $1/1e6}')"
# The two documented uses: a job image FROM lockrun, and COPY --from=lockrun into another image.
mkdir -p "$tmp/job-image" "$tmp/other-image"
printf '#!/bin/sh\necho "job ran, fence=$LOCKRUN_FENCE"\n' >"$tmp/job-image/job.sh"
chmod +x "$tmp/job-image/job.sh"
printf 'FROM lockrun\nCOPY job.sh /job.sh\nCMD ["nightly", "--", "/job.sh"]\n' >"$tmp/job-image/Dockerfile"
printf 'FROM debian:bookworm-slim\nCOPY --from=lockrun /usr/local/bin/lockrun /usr/local/bin/lockrun\nRUN lockrun --version\n' \
  >"$tmp/other-image/Dockerfile"
# Static in practice: the binary alone in an empty image (no libc, no loader) still runs.
mkdir -p "$tmp/scratch-image"
printf 'FROM scratch\nCOPY --from=lockrun /usr/local/bin/lockrun /lockrun\nENTRYPOINT ["/lockrun"]\n' \
  >"$tmp/scratch-image/Dockerfile"
docker build -q -t lockrun-test-job "$tmp/job-image" >/dev/null
docker build -q -t lockrun-test-other "$tmp/other-image" >/dev/null
docker build -q -t lockrun-test-scratch "$tmp/scratch-image" >/dev/null
[ "$(docker run --rm lockrun-test-scratch --version)" = "$version" ] \
  || fail "lockrun --version in a FROM scratch image (is the binary really static?)"
ok "FROM lockrun and COPY --from=lockrun both build; the binary runs alone in FROM scratch"
# The job image (FROM lockrun) run as documented: lockrun is PID 1 there, the job its command.
job_out=$(docker run --rm --network "${COMPOSE_PROJECT_NAME}_default" \
  -e LOCKRUN_REDIS_URL=redis://redis:6379 lockrun-test-job 2>&1) \
  || { echo "$job_out" >&2; fail "the job image (FROM lockrun) did not run its job"; }
grep -q '^job ran, fence=[0-9]' <<<"$job_out" || { echo "$job_out" >&2; fail "the job image: no fence"; }
grep -q 'redis lock released' <<<"$job_out" || { echo "$job_out" >&2; fail "the job image: not released"; }
ok "the job image (FROM lockrun, lockrun as PID 1) ran its job under the lock and released it"

phase "packaging/build-static.sh: waiting for the background build"
# Before the timed part of the scenario, which a loaded machine could disturb.
if ! wait "$host_build_pid"; then
  host_build_pid=
  tail -30 "$tmp/host-build.log" >&2
  fail "packaging/build-static.sh (the host build)"
fi
host_build_pid=
host_build_ms=$(( ($(date +%s%N) - host_build_t0) / 1000000 ))
grep -E 'Finished|static-pie' "$tmp/host-build.log" || true
bin=$(tail -1 "$tmp/host-build.out")
[ "$bin" = "$root/target/$triple/release/lockrun" ] || fail "build-static.sh printed '$bin', expected target/$triple/release/lockrun"
assert_static "$bin" "the host build"
# The Docker build context is the repository root: the binary's path relative to it.
prebuilt=${bin#"$root"/}
[ "$("$bin" --version)" = "$version" ] || fail "the host build says '$("$bin" --version)', the image '$version'"
ok "$version: $prebuilt, static-pie"

phase "compose: three ticks of $tick s (job 3 s, exit 3; --every ${tick}s keeps the key 5 s)"
# Every replica ticks at multiples of $tick on the shared clock. The first whole tick is the next
# boundary after all three are up; watch three ticks, check the key between ticks.
now_s() { date +%s.%N; }
sleep_until() { local d; d=$(awk -v t="$1" -v n="$(now_s)" 'BEGIN { d = t - n; print (d > 0 ? d : 0) }'); sleep "$d"; }
# A second of margin: a replica whose shell had not yet read the clock when `up -d` returned
# would otherwise wait for the tick after.
first=$(( ( ($(date +%s) + 1) / tick + 1 ) * tick ))
last=$(( first + 2 * tick ))
# docker exec, not docker-compose exec: it answers in ~0.1 s instead of ~1 s, which matters here.
redis_id=$(compose ps -q redis)
redis_cli() { docker exec "$redis_id" redis-cli "$@" | tr -d '\r'; }
# While the job runs (+1.5 s), the key has the full lease. After the job (+3 s) and until
# --every's hold ends (+5 s: the 6 s period less a second), the key is still there but expiring;
# then it is gone, before the next tick.
sleep_until "$first.5"
pttl=$(redis_cli PTTL report)
echo "tick $first + 1.5 s: PTTL report = $pttl ms (the job runs; lease 30 s, renewed every 10 s)"
[ "$pttl" -gt 25000 ] || fail "expected a live 30 s lease while the job runs, PTTL=$pttl"
sleep_until "$((first + 3)).4"
pttl=$(redis_cli PTTL report)
echo "tick $first + 3.4 s: PTTL report = $pttl ms (job done; key kept until the hold ends; -2 = gone)"
[ "$pttl" = -2 ] || { [ "$pttl" -gt 0 ] && [ "$pttl" -le 1700 ]; } \
  || fail "expected the key expiring within 1.7 s or gone, PTTL=$pttl"
until [ "$(redis_cli EXISTS report)" = 0 ]; do
  [ "$(date +%s)" -lt $((first + tick)) ] || fail "the key is still there at the next tick"
  sleep 0.1
done
echo "tick $first + $(awk -v t="$(now_s)" -v f="$first" 'BEGIN { printf "%.1f", t - f }') s: EXISTS report = 0"
status_rc=0
compose exec -T --index=1 cron-service lockrun status report || status_rc=$?
[ "$status_rc" = 1 ] || fail "lockrun status report between ticks: exit $status_rc, expected 1 (free)"
sleep_until "$((last + 4)).5"

phase "compose: docker-compose stop while a job runs (SIGTERM)"
stop_tick=$((last + tick))
sleep_until "$stop_tick.5"      # the job of this tick started ~0.5 s ago and runs 3 s
t0=$(date +%s%N)
compose stop -t 20 cron-service 2>&1
stop_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
echo "docker-compose stop -t 20 cron-service took ${stop_ms} ms"
for c in "${replicas[@]}"; do
  code=$(docker inspect -f '{{.State.ExitCode}}' "$c")
  [ "$code" = 143 ] || fail "container $c exited $code, expected 143 (tick.sh after SIGTERM; 137 = SIGKILL)"
done
[ "$stop_ms" -lt 8000 ] || fail "stop took ${stop_ms} ms: SIGTERM was not passed on promptly"
ok "all replicas exited 143 after SIGTERM, in ${stop_ms} ms (grace 20 s unused)"

phase "compose: checking the logs"
compose logs --no-color cron-service >"$tmp/cron.log" 2>&1
history=$(compose run --rm --no-deps --entrypoint lockrun cron-service history -n 20 report 2>&1) \
  || { echo "$history" >&2; fail "lockrun history through the container"; }
echo "$history"
python3 - "$tmp/cron.log" "$first" "$last" "$tick" "$stop_tick" <<'EOF'
import re, sys
from collections import defaultdict
path, first, last, tick, stop_tick = sys.argv[1], *map(int, sys.argv[2:])
# "lockrunpkgtest_cron-service_2  | text"
events = defaultdict(lambda: defaultdict(list))   # slot -> replica -> [lines]
slot = {}
for line in open(path, errors="replace"):
    if " | " not in line:
        continue
    who, text = line.split(" | ", 1)
    who, text = who.strip(), text.rstrip("\n")
    m = re.match(r"tick: slot=(\d+)", text)
    if m:
        slot[who] = int(m.group(1))
        continue
    if who in slot:
        events[slot[who]][who].append(text)
errors = []
def check(cond, msg):
    if not cond:
        errors.append(msg)
for s in range(first, last + 1, tick):
    reps = events[s]
    acquired = [w for w, ls in reps.items() if any("redis lock acquired, starting job" in l for l in ls)]
    already = [w for w, ls in reps.items() if any("redis lock already acquired" in l for l in ls)]
    print(f"tick {s}: {len(reps)} replicas; acquired: {acquired}; already acquired: {already}")
    if s == first:
        for w in sorted(reps):
            print("\n".join(f"  {w} | {l}" for l in reps[w]))
    check(len(reps) == 3, f"tick {s}: {len(reps)} replicas ticked, expected 3")
    check(len(acquired) == 1, f"tick {s}: {len(acquired)} replicas logged 'redis lock acquired, starting job', expected exactly 1")
    check(len(already) == 2, f"tick {s}: {len(already)} replicas logged 'redis lock already acquired', expected 2")
    for w in acquired:
        ls = reps[w]
        check(sum("job: running" in l for l in ls) == 1, f"tick {s}: the job did not run once on {w}")
        check(any("redis lock released" in l for l in ls), f"tick {s}: no 'redis lock released' from {w}")
        check("tick: lockrun exit=3" in ls, f"tick {s}: {w} did not report lockrun exit=3 (the job's code)")
    for w in already:
        check("tick: lockrun exit=0" in reps[w], f"tick {s}: {w} skipped but lockrun did not exit 0 (-E 0)")
        check(not any("job: running" in l for l in reps[w]), f"tick {s}: the job ran on {w} too")
# The tick interrupted by docker-compose stop.
reps = events[stop_tick]
acquired = [w for w, ls in reps.items() if any("redis lock acquired, starting job" in l for l in ls)]
print(f"stop tick {stop_tick}: acquired: {acquired}")
check(len(acquired) == 1, f"stop tick: {len(acquired)} holders, expected 1")
for w in acquired:
    ls = reps[w]
    print("\n".join(f"  {w} | {l}" for l in ls))
    check(any(l.startswith("tick: SIGTERM") for l in ls), "stop tick: tick.sh did not get SIGTERM")
    check(any("job: got SIGTERM" in l for l in ls), "stop tick: the job did not get SIGTERM from lockrun")
    check(not any("job: done" in l for l in ls), "stop tick: the job ran to its end instead of stopping")
    check(any("redis lock released" in l for l in ls), "stop tick: lockrun did not release the lock")
    check("tick: lockrun exit=143" in ls, "stop tick: lockrun did not exit 143 (128+SIGTERM, the job's own 143)")
if errors:
    print("\n".join("FAIL: " + e for e in errors), file=sys.stderr)
    sys.exit(1)
print("ok: exactly one replica per tick ran the job; the others logged 'redis lock already acquired'")
EOF
grep -q ' ran  *3 ' <<<"$history" || fail "history has no 'ran' entry with exit 3"
grep -q ' skipped ' <<<"$history" || fail "history has no 'skipped' entry"
grep -q ' aborted ' <<<"$history" || fail "history has no 'aborted' entry for the stopped job"
sleep_until "$((stop_tick + 5)).5"   # the hold of the stopped tick's lock
exists=$(redis_cli EXISTS report)
[ "$exists" = 0 ] || fail "the key is still there after the stopped tick's hold (EXISTS=$exists)"
ok "key 'report' gone after the stopped tick"

phase "compose: --standby, one fault a tick on the replica that took it (7 ticks of 15 s)"
# The same replicas recreated with lockrun's LOCKRUN_STANDBY=1 and a short lease
# (LOCKRUN_TTL=3s: a tick whose replica dies is taken over within 3 s), the job 8 s, so that the
# takeover's job ends inside the tick. What is done, and checked, in each tick:
# packaging/test-compose-standby.py.
tick=15 ttl_s=3
export TICK_SECONDS=$tick JOB_SECONDS=8 JOB_EXIT=0 LOCKRUN_STANDBY=1 LOCKRUN_TTL=${ttl_s}s
compose up -d --scale cron-service=3 >"$tmp/up-standby.log" 2>&1 \
  || { tail -20 "$tmp/up-standby.log" >&2; fail "docker-compose up with LOCKRUN_STANDBY=1"; }
mapfile -t replicas < <(compose ps -q cron-service)
[ ${#replicas[@]} = 3 ] || fail "expected 3 cron-service containers, got ${#replicas[@]}"
for c in "${replicas[@]}"; do
  [ "$(docker exec "$c" printenv LOCKRUN_STANDBY LOCKRUN_TTL | tr '\n' ' ')" = "1 ${ttl_s}s " ] \
    || fail "LOCKRUN_STANDBY and LOCKRUN_TTL were not passed on to $c"
done
redis_id=$(compose ps -q redis)
# Two seconds of margin, as above.
first=$(( ( $(date +%s) + 2 ) / tick * tick + tick ))
python3 packaging/test-compose-standby.py "$first" "$tick" "$ttl_s" "${COMPOSE_PROJECT_NAME}_default" \
  "$redis_id" "${replicas[@]}" || fail "the compose scenario with standbys"
unset LOCKRUN_STANDBY LOCKRUN_TTL TICK_SECONDS JOB_SECONDS JOB_EXIT

phase "compose: docs/installing.md's standby block, as a user pastes it (docker kill of the holder)"
# The block under "Standby replicas", run whole with bash -e from the checkout's root, with the
# compose file's default knobs, on a new Redis as a reader's would be (the last phase's tick,
# stopped by the replicas' recreation, is not the reader's).
compose down -v --remove-orphans -t 5 >/dev/null 2>&1
awk '/^### Standby replicas/ { s = 1 } s && /^```sh$/ { b = 1; next } b && /^```$/ { exit } b' \
  docs/installing.md >"$tmp/standby-block.sh"
grep -q '^docker kill' "$tmp/standby-block.sh" || fail "no standby block found in docs/installing.md"
(cd "$checkout" && timeout 600 bash -e "$tmp/standby-block.sh") >"$tmp/standby-block.out" 2>&1 \
  || { cat "$tmp/standby-block.out" >&2; fail "docs/installing.md's standby block"; }
# What the block shows (without the image build's output).
grep -E -e ' \| ' -e '^TIME ' -e '^[0-9]{4}-' "$tmp/standby-block.out" | sed 's/^/  /'
for said in "WARN the host that took this tick did not complete it; running it here key=report attempt=2" \
            "job: running on" "lost (attempt 1)" "ran (attempt 2)"; do
  grep -q "$said" "$tmp/standby-block.out" || fail "the standby block's output has no '$said'"
done
[ "$(compose ps -q cron-service | xargs docker inspect -f '{{.State.Running}}' | sort -u)" = true ] \
  || fail "the standby block's docker-compose up -d did not bring the killed replica back"
ok "docs/installing.md's standby block: a standby replica ran the killed replica's tick"

phase "compose: down"
compose down -v --remove-orphans -t 5 >/dev/null 2>&1
compose_up=

# ------------------------------------------------- packaging/prebuilt.Dockerfile, the host build
phase "packaging/prebuilt.Dockerfile (the host's binary): docker build; docker-compose's LOCKRUN_DOCKERFILE"
docker build -q -f packaging/prebuilt.Dockerfile -t lockrun-prebuilt . >/dev/null
[ "$(docker run --rm lockrun-prebuilt --version)" = "$version" ] || fail "the prebuilt image's lockrun --version"
# It ships the host build itself, not some other lockrun that happened to be in the context.
image_ctr=$(docker create lockrun-prebuilt)
docker cp "$image_ctr:/usr/local/bin/lockrun" "$tmp/prebuilt-lockrun" >/dev/null
docker rm "$image_ctr" >/dev/null
cmp -s "$tmp/prebuilt-lockrun" "$bin" || fail "the prebuilt image's /usr/local/bin/lockrun is not $prebuilt"
assert_static "$tmp/prebuilt-lockrun" "the prebuilt image's /usr/local/bin/lockrun"
# The same image as packaging/Dockerfile's but for where the binary comes from: the same two
# first layers (debian:bookworm-slim, ca-certificates), entrypoint, command, environment.
same='{{index .RootFS.Layers 0}} {{index .RootFS.Layers 1}} {{json .Config.Entrypoint}} {{json .Config.Cmd}} {{json .Config.Env}}'
[ "$(docker image inspect -f "$same" lockrun-prebuilt)" = "$(docker image inspect -f "$same" lockrun)" ] \
  || fail "packaging/prebuilt.Dockerfile's image differs from packaging/Dockerfile's beyond the binary"
ok "lockrun-prebuilt: the host's static $prebuilt in packaging/Dockerfile's image"
# The compose file's knob for it, from this checkout (which has the binary).
(cd packaging/compose && LOCKRUN_DOCKERFILE=packaging/prebuilt.Dockerfile docker-compose build cron-service) \
  >"$tmp/compose-prebuilt.log" 2>&1 \
  || { tail -20 "$tmp/compose-prebuilt.log" >&2; fail "docker-compose build with LOCKRUN_DOCKERFILE=packaging/prebuilt.Dockerfile"; }
image_ctr=$(docker create lockrun-demo-cron-service)
docker cp "$image_ctr:/usr/local/bin/lockrun" "$tmp/compose-prebuilt-lockrun" >/dev/null
docker rm "$image_ctr" >/dev/null
cmp -s "$tmp/compose-prebuilt-lockrun" "$bin" || fail "LOCKRUN_DOCKERFILE=packaging/prebuilt.Dockerfile: cron-service's lockrun is not $prebuilt"
ok "LOCKRUN_DOCKERFILE=packaging/prebuilt.Dockerfile docker-compose build: cron-service carries $prebuilt"

# ------------------------------------------------------------------------------------ .deb
phase ".deb and .rpm: cargo deb, cargo generate-rpm (tools in target/packaging/tools)"
# Pinned, built from crates.io once per clone (cargo-deb ~1.5 min, cargo-generate-rpm ~4 min on
# 2 cores), then reused. They read [package.metadata.deb] / [package.metadata.generate-rpm].
# Both get --target <host triple>: that rewrites the assets' target/release/lockrun (the dynamic
# build from `cargo build --release`) to target/<triple>/release/lockrun, the static build above.
tools=$cache/tools
export PATH="$tools/bin:$PATH"
cargo deb --version 2>/dev/null | grep -q '3\.8\.0' \
  || cargo install --locked --quiet --root "$tools" cargo-deb --version 3.8.0
# The .rpm costs ~4 min of tool build on a clean clone; CI (which checks the .deb) sets
# LOCKRUN_PACKAGING_RPM=0 and says so below; by hand it is built.
rpm_wanted=${LOCKRUN_PACKAGING_RPM:-1}
if [ "$rpm_wanted" = 1 ]; then
  cargo generate-rpm --version 2>/dev/null | grep -q "$rpm_tool_version" \
    || cargo install --locked --quiet --root "$tools" cargo-generate-rpm --version "$rpm_tool_version"
fi
rm -f target/debian/*.deb
# cargo-deb warns "No $auto deps" here: expected, a static binary links no shared library.
cargo deb --target "$triple" --no-build >"$tmp/deb.out"
deb=$(tail -1 "$tmp/deb.out")
[ -s "$deb" ] || fail "cargo deb printed no package path"
dpkg-deb -x "$deb" "$tmp/deb-root"
cmp -s "$tmp/deb-root/usr/bin/lockrun" "$bin" || fail "the .deb's /usr/bin/lockrun is not $prebuilt"
assert_static "$tmp/deb-root/usr/bin/lockrun" "the .deb's /usr/bin/lockrun"
# dpkg-shlibdeps ($auto) finds no shared library in a static binary: no libc6 dependency.
deb_depends=$(dpkg-deb -f "$deb" Depends)
[ -z "$deb_depends" ] || fail "the .deb depends on '$deb_depends'; a static lockrun needs nothing"
ok "built $deb (static /usr/bin/lockrun, no Depends)"
if [ "$rpm_wanted" = 1 ]; then
  rm -f target/generate-rpm/*.rpm
  mkdir -p target/generate-rpm
  # -o: the same place as without --target (which would write to target/<triple>/generate-rpm).
  cargo generate-rpm --target "$triple" -o target/generate-rpm/
  rpm_file=$(ls target/generate-rpm/lockrun-*.rpm)
  # The .rpm's /usr/bin/lockrun is the static build, byte for byte: its SHA-256 in the package
  # header against the file's. (Not extracted: rpm2cpio exits 1 on these packages even though
  # its output is complete.)
  rpm_sha=$(rpm -qp --dump "$rpm_file" 2>/dev/null | awk '$1 == "/usr/bin/lockrun" { print $4 }')
  [ "$rpm_sha" = "$(sha256sum <"$bin" | cut -d' ' -f1)" ] \
    || fail "the .rpm's /usr/bin/lockrun (sha256 '$rpm_sha') is not $prebuilt"
  rpm -qlp "$rpm_file" 2>/dev/null | sort >"$tmp/rpm.list"
  for f in /usr/bin/lockrun /usr/share/man/man1/lockrun.1 /usr/share/man/man1/lockrun-status.1 \
           /usr/share/bash-completion/completions/lockrun /usr/share/zsh/site-functions/_lockrun \
           /usr/share/fish/vendor_completions.d/lockrun.fish /usr/share/licenses/lockrun/LICENSE-MIT \
           /usr/share/doc/lockrun/examples/lockrun-example.timer \
           /usr/share/doc/lockrun/examples/lockrun.rules.yml /usr/share/doc/lockrun/docs/guide.md; do
    grep -qx "$f" "$tmp/rpm.list" || fail "$f missing from $rpm_file"
  done
  ok "built $rpm_file ($(wc -l <"$tmp/rpm.list") files, static /usr/bin/lockrun)"
else
  echo ">>> .rpm NOT built: LOCKRUN_PACKAGING_RPM=0 (CI saves the ~4 min tool build; run bash packaging/test.sh to build and check it)" >&2
fi
phase ".deb: dpkg -i, lockrun --version, man -w, completions, systemd-analyze verify"
if dpkg-query -W -f '${Status}' lockrun 2>/dev/null | grep -q 'ok installed'; then
  fail "a lockrun package is already installed here: remove it first (this test installs and removes its own)"
fi
deb_installed=1
dpkg -i "$deb" >/dev/null
[ "$(/usr/bin/lockrun --version)" = "$version" ] || fail "/usr/bin/lockrun --version"
man_path=$(man -w lockrun) || fail "man -w lockrun"
[ "$man_path" = /usr/share/man/man1/lockrun.1.gz ] || fail "man -w lockrun: $man_path"
man -w lockrun-status >/dev/null || fail "man -w lockrun-status"
MANWIDTH=80 man -P cat lockrun 2>/dev/null | grep -q -- '--kill-after' || fail "man lockrun does not render the options"
for f in /usr/share/bash-completion/completions/lockrun /usr/share/zsh/vendor-completions/_lockrun \
         /usr/share/fish/vendor_completions.d/lockrun.fish /usr/share/doc/lockrun/copyright \
         /usr/share/doc/lockrun/examples/lockrun.rules.yml; do
  [ -s "$f" ] || fail "$f missing from the package"
done
# The installed README's links to docs/ resolve: every document ships beside it.
for f in docs/*.md; do
  [ -s "/usr/share/doc/lockrun/$f" ] || fail "/usr/share/doc/lockrun/$f missing from the package (README.md links to it)"
done
# The alert rules as shipped are the ones tests/cases/alerting.rs checks with promtool.
cmp -s /usr/share/doc/lockrun/examples/lockrun.rules.yml packaging/prometheus/lockrun.rules.yml \
  || fail "the .deb's lockrun.rules.yml is not packaging/prometheus/lockrun.rules.yml"
bash -c 'source /usr/share/bash-completion/completions/lockrun && complete -p lockrun' >/dev/null \
  || fail "the bash completion does not load"
systemd-analyze verify packaging/systemd/lockrun-example.service packaging/systemd/lockrun-example.timer \
  || fail "systemd-analyze verify"
ok "$(dpkg-query -W lockrun) installed: $man_path"
dpkg -r lockrun >/dev/null
deb_installed=

# ------------------------------------------------------------------------------ Kubernetes
phase "kubernetes-validate (venv in target/packaging/venv)"
venv=$cache/venv
if ! "$venv/bin/kubernetes-validate" --version 2>/dev/null | grep -q '1\.37\.0'; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q 'kubernetes-validate==1.37.0'
fi
"$venv/bin/kubernetes-validate" --strict packaging/kubernetes/*.yaml

# ---------------------------------------------------------------- generated docs up to date
phase "packaging/check-generated.sh"
bash packaging/check-generated.sh

phase
echo "=== timings"
printf '%s\n' "${timings[@]}"
awk -v d="$host_build_ms" 'BEGIN { printf "%7.1fs  (packaging/build-static.sh on the host, in the background: from its start to its end)\n", d / 1000 }'
awk -v d=$(( ($(date +%s%N) - t_all) / 1000000 )) 'BEGIN { printf "%7.1fs  total\n", d / 1000 }'
# Each phase above is a group of checks that failed the script at the first miss.
echo "packaging: ${#timings[@]} passed, 0 failed"
