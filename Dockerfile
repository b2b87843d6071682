# syntax=docker/dockerfile:1
# Build: docker build -t meili-reconciler .
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock rustfmt.toml ./
COPY src ./src
COPY tests ./tests
COPY config ./config
RUN cargo build --release --locked --bin meili-reconciler --bin meili-seed

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /app reconciler
WORKDIR /app
COPY --from=build /src/target/release/meili-reconciler /usr/local/bin/meili-reconciler
COPY --from=build /src/target/release/meili-seed /usr/local/bin/meili-seed
COPY config/default.toml /app/config/default.toml
USER reconciler
EXPOSE 9464
ENV RECONCILER__SERVE__LISTEN=0.0.0.0:9464
ENTRYPOINT ["meili-reconciler"]
CMD ["run"]
