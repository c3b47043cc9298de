# syntax=docker/dockerfile:1
# gpuslice's image for users with a registry and a Docker-compatible builder (docker build, podman build,
# buildah bud, kaniko):   docker build -t REGISTRY/gpuslice:0.1.0 .
#
# The project's own, tested path builds no image from a registry base: image/build.sh packages an already
# built binary with exactly the Debian packages that own its shared libraries (reproducible digest, tested by
# tests/image/image_test.sh). This Dockerfile makes the same runtime contents from Debian's published images:
# the same packages, the same user 65532, entrypoint and ports. It is not built by CI (no registry there).
# Pin a dated tag or a digest (debian:bookworm-YYYYMMDD-slim@sha256:...) for repeatable builds.
ARG DEBIAN=debian:bookworm-slim

FROM ${DEBIAN} AS build
RUN apt-get update && apt-get install -y --no-install-recommends \
      build-essential cmake ninja-build g++-12 pkg-config git ca-certificates python3 \
      libboost1.81-dev libboost-json1.81-dev libssl-dev libyaml-cpp-dev libcli11-dev libfmt-dev nlohmann-json3-dev catch2 \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cmake --preset release && cmake --build --preset release --target gpuslice -j"$(nproc)" \
    && install -D -m 0755 build/release/cmd/gpuslice /out/usr/bin/gpuslice

FROM ${DEBIAN}
# Exactly the runtime libraries of a release build (what `ldd build/release/cmd/gpuslice` lists).
RUN apt-get update && apt-get install -y --no-install-recommends \
      libssl3 libyaml-cpp0.7 libfmt9 libboost-json1.81.0 libboost-container1.81.0 libstdc++6 libgcc-s1 \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /usr/share/doc/* /usr/share/man/*
COPY --from=build /out/ /
USER 65532:65532
EXPOSE 9443 8080
ENTRYPOINT ["/usr/bin/gpuslice"]
CMD ["serve"]
