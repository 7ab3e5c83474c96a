# syntax=docker/dockerfile:1
# The operator image (crates/operator):
#   docker build -t ghcr.io/bulwark-dev/mysql-operator:0.1.0 .
# It runs `mysql-operator run` as the distroless "nonroot" user (65532); the Helm chart
# (charts/mysql-operator) passes its settings as MYSQL_OPERATOR_* environment variables.
#
# Build arguments (the defaults build the published image):
#   BINARIES    source: build mysql-operator with cargo in the Rust image (default);
#               prebuilt: take an already built bin/mysql-operator from the build context
#               (the Rust image is then never needed: the source stage is skipped)
#   BASE_IMAGE  the runtime image (default: distroless cc, which carries glibc and libgcc)
#   RUST_VERSION  the toolchain of the source build
# buildah/podman (1.28 at least) skip stages by the --build-arg values only, not by ARG
# defaults: with them, pass --build-arg BINARIES=source or =prebuilt explicitly.
# e.g. tests/node/bulwark-images.sh builds with
#   --build-arg BINARIES=prebuilt --build-arg BASE_IMAGE=bulwark.local/debian:bookworm

# The toolchain must be at least the highest rust-version in Cargo.lock's dependency graph
# (1.89, which is also the workspace's rust-version). 1.95 is the version
# the tests run with.
ARG RUST_VERSION=1.95
ARG BINARIES=source
ARG BASE_IMAGE=gcr.io/distroless/cc-debian12:nonroot

FROM docker.io/library/rust:${RUST_VERSION}-bookworm AS binaries-source
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p mysql-operator \
    && install -D -m 0755 target/release/mysql-operator /out/mysql-operator

FROM scratch AS binaries-prebuilt
COPY bin/mysql-operator /out/mysql-operator

FROM binaries-${BINARIES} AS binaries

FROM ${BASE_IMAGE}
COPY --from=binaries /out/mysql-operator /usr/local/bin/mysql-operator
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/mysql-operator"]
CMD ["run"]
