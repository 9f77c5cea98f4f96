# Multi-stage build: compile with the Rust toolchain, run on a small Debian image as a
# non-root user with the data directory on a volume.
FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
# Dependencies first, so source edits reuse the cached dependency layer.
COPY Cargo.toml Cargo.lock build.rs ./
RUN mkdir -p src benches/catalog && echo 'fn main() {}' > src/main.rs && touch src/lib.rs \
    && echo 'fn main() {}' > benches/catalog/main.rs \
    && mkdir -p catalog static templates migrations \
    && cargo fetch --locked
COPY . .
RUN cargo build --release --locked --bin marketplace

FROM debian:bookworm-slim
# The image mirror verifies HTTPS upstreams (ghcr.io, ...) against the system's roots.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 marketplace \
    && useradd --system --uid 10001 --gid marketplace --home-dir /data --shell /usr/sbin/nologin marketplace \
    && mkdir -p /data && chown marketplace:marketplace /data
COPY --from=build /src/target/release/marketplace /usr/local/bin/marketplace
USER 10001:10001
VOLUME ["/data"]
EXPOSE 8080
ENV MARKETPLACE_LISTEN=0.0.0.0:8080 \
    MARKETPLACE_DATA_DIR=/data \
    MARKETPLACE_LOG_FORMAT=json
ENTRYPOINT ["/usr/local/bin/marketplace"]
CMD ["serve"]
