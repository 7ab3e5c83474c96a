# syntax=docker/dockerfile:1
# The operator image (crates/operator):
#   docker build -t ghcr.io/bulwark-dev/mysql-operator:0.1.0 .
# It runs `mysql-operator run` as the distroless "nonroot" user (65532); the Helm chart
# (charts/mysql-operator) passes its settings as MYSQL_OPERATOR_* environment variables.

# The toolchain must be at least the highest rust-version in Cargo.lock's dependency graph
# (1.89, which is also the workspace's rust-version). 1.95 is the version
# the tests run with.
ARG RUST_VERSION=1.95

FROM docker.io/library/rust:${RUST_VERSION}-bookworm AS builder
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p mysql-operator \
    && install -D -m 0755 target/release/mysql-operator /out/mysql-operator

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=builder /out/mysql-operator /usr/local/bin/mysql-operator
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/mysql-operator"]
CMD ["run"]
