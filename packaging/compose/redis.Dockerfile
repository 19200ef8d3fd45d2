# Redis for the compose demo, built from Debian's package (no registry image needed).
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends redis-server \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin
EXPOSE 6379
# No persistence: the demo's locks live in memory only.
CMD ["redis-server", "--bind", "0.0.0.0", "--protected-mode", "no", "--save", "", "--appendonly", "no"]
