# lockrun's container image from a static lockrun built on the host, without the Rust image: the
# image of packaging/Dockerfile (see there, also for why this is a file of its own), with the
# binary copied in instead of built. From the repository root:
#
#   bash packaging/build-static.sh     # prints target/<host triple>/release/lockrun
#   docker build -f packaging/prebuilt.Dockerfile -t lockrun .
#
# PREBUILT, the binary relative to the repository root, defaults to the one target/<triple>/ the
# script made, whatever the architecture (the root .dockerignore lets in only those binaries from
# target/); if several triples were built, name one:
#   --build-arg PREBUILT=target/aarch64-unknown-linux-gnu/release/lockrun

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin
# Must be a static build (packaging/build-static.sh): the plain `cargo build` binary would only
# run here if linked against bookworm's glibc (2.36) or older. packaging/test.sh checks this.
# No binary yet (run build-static.sh first): the classic builder stops here with "COPY failed: no
# source files were specified"; BuildKit copies nothing for a wildcard and stops at the RUN below
# with "lockrun: not found".
ARG PREBUILT=target/*/release/lockrun
COPY ${PREBUILT} /usr/local/bin/lockrun
RUN lockrun --version
ENTRYPOINT ["lockrun"]
CMD ["--help"]
