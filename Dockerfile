# syntax=docker/dockerfile:1
# Build: docker build -t meili-reconciler .
# The image holds the service alone. `--target seed` builds one holding
# `meili-seed` (testkit/), for docker-compose.yml's demo data.
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock rustfmt.toml ./
COPY src ./src
COPY testkit ./testkit
COPY tests ./tests
COPY config ./config
RUN cargo build --release --locked --bin meili-reconciler

FROM build AS seed-build
RUN cargo build --release --locked --bin meili-seed

FROM debian:bookworm-slim AS runtime
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /app reconciler
WORKDIR /app

FROM runtime AS seed
COPY --from=seed-build /src/target/release/meili-seed /usr/local/bin/meili-seed
USER reconciler
ENTRYPOINT ["meili-seed"]

FROM runtime
COPY --from=build /src/target/release/meili-reconciler /usr/local/bin/meili-reconciler
COPY config/default.toml /app/config/default.toml
USER reconciler
EXPOSE 9464
ENV RECONCILER__SERVE__LISTEN=0.0.0.0:9464
ENTRYPOINT ["meili-reconciler"]
CMD ["run"]
