# syntax=docker/dockerfile:1
# gpuslice's image for users with a registry and a Docker-compatible builder (docker build, podman build,
# buildah bud, kaniko):
#
#   docker build -t REGISTRY/gpuslice:0.1.0 .                  # compiles a release build in the `build` stage
#   docker build -t REGISTRY/gpuslice:0.1.0 --target prebuilt \
#     --build-arg GPUSLICE_BINARY=build/release/cmd/gpuslice .  # packages an already built binary instead
#
# The project's own, reproducible path builds no image from a registry base: image/build.sh packages an already
# built binary with exactly the Debian packages that own its shared libraries. This Dockerfile makes the same
# runtime contents from Debian's published image: the same packages, the same user 65532, entrypoint and ports.
# tests/image/image_test.sh builds its `prebuilt` target with no registry and no network (podman build
# --pull=never --network none; DEBIAN= a Debian base made from the test machine's installed packages, the
# runtime packages from a local repository) and runs the result as it runs image/build.sh's image.
# Pin a dated tag or a digest (debian:bookworm-YYYYMMDD-slim@sha256:...) for repeatable builds.
#
# Build arguments:
#   DEBIAN            the base of every stage (default debian:bookworm-slim, from Docker Hub)
#   BUILD_PACKAGES    what the build stage installs to compile (CMakeLists.txt's find_package()s)
#   RUNTIME_PACKAGES  the runtime libraries of a release build (what `ldd build/release/cmd/gpuslice` finds)
#   EXTRA_PACKAGES    more runtime packages, e.g. "libasan8 libubsan1" for a sanitizer build
#   GPUSLICE_BINARY   target prebuilt: the binary's path in the build context
ARG DEBIAN=debian:bookworm-slim

FROM ${DEBIAN} AS build
ARG BUILD_PACKAGES="build-essential cmake ninja-build g++-12 pkg-config git ca-certificates python3 libboost1.81-dev libboost-json1.81-dev libssl-dev libyaml-cpp-dev libcli11-dev libfmt-dev nlohmann-json3-dev catch2 zlib1g-dev"
RUN apt-get update && apt-get install -y --no-install-recommends ${BUILD_PACKAGES} && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cmake --preset release && cmake --build --preset release --target gpuslice -j"$(nproc)" \
    && install -D -m 0755 build/release/cmd/gpuslice /out/usr/bin/gpuslice

FROM ${DEBIAN} AS runtime
ARG RUNTIME_PACKAGES="libssl3 libyaml-cpp0.7 libfmt9 libboost-json1.81.0 libboost-container1.81.0 libstdc++6 libgcc-s1 zlib1g"
ARG EXTRA_PACKAGES=""
RUN apt-get update && apt-get install -y --no-install-recommends ${RUNTIME_PACKAGES} ${EXTRA_PACKAGES} \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /usr/share/doc/* /usr/share/man/*
USER 65532:65532
EXPOSE 9443 8080
ENTRYPOINT ["/usr/bin/gpuslice"]
CMD ["serve"]

# --target prebuilt: an already built binary from the build context (no compiler, no build stage).
FROM runtime AS prebuilt
ARG GPUSLICE_BINARY=build/release/cmd/gpuslice
COPY ${GPUSLICE_BINARY} /usr/bin/gpuslice

# The default target (the last stage): the binary the build stage compiled.
FROM runtime AS image
COPY --from=build /out/ /
