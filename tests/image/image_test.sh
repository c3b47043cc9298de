#!/usr/bin/env bash
# The container image (image/build.sh), built from the binary under test and run with podman:
#   1. built twice from the same inputs: the same manifest digest and a byte-identical oci-archive;
#   2. the image config: user 65532:65532, entrypoint /usr/bin/gpuslice, no shell, no package manager;
#   3. `gpuslice version` in a read-only container with every capability dropped, as user 65532;
#   4. `serve` (webhook only: no API server) in a network namespace this test creates: /readyz over TLS, and
#      one AdmissionReview whose response is byte-identical to the same binary's answer run outside the image
#      and sets schedulerName gpuslice-scheduler;
#   5. ./Dockerfile, built with no registry and no network: `podman build --pull=never --network none` FROM a
#      Debian base made from this machine's installed packages (tests/image/host_debian_base.sh, `podman
#      import`), its `apt-get install` served by a local repository of the exact .debs (image/build.sh's cache),
#      its `prebuilt` target with the binary under test; the image then passes 3 and 4 as well, and its
#      RUNTIME_PACKAGES cover what ldd finds (a broken Dockerfile fails the build or the checks).
#
#   tests/image/image_test.sh [BINARY]      (default: $GPUSLICE_BIN, else build/asan/cmd/gpuslice)
#   IMAGE_TEST_ONLY=umoci|dockerfile        run only one of the two images (development)
#
# Needs root (ip netns, image/build.sh), podman and runc. podman on these machines needs `--runtime runc` and
# explicit ulimits (crun's default setrlimit fails here). Network: loopback inside the namespace only; the .debs
# come from image/build.sh's cache (filled from the Debian mirror by the first build, `apt-get download`).
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
BIN=$(readlink -f "${1:-${GPUSLICE_BIN:-build/asan/cmd/gpuslice}}")
[[ -x $BIN ]] || { echo "image_test: no gpuslice binary at $BIN" >&2; exit 1; }
ONLY=${IMAGE_TEST_ONLY:-}
NS=${GPUSLICE_LAB_NETNS_PREFIX:-gs}-image
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpuslice-image-test.XXXXXX")
NAME=localhost/gpuslice-image-test-$$
DNAME=localhost/gpuslice-dockerfile-test-$$
BASE=localhost/gpuslice-debian-base-test-$$
CTR=gpuslice-image-test-$$
CACHE=${GPUSLICE_IMAGE_CACHE:-$HOME/.cache/gpuslice-image/debs}
PODMAN=(podman --runtime runc)
ULIMITS=(--ulimit nofile=20000:20000 --ulimit nproc=4096:4096)
RUNOPTS=(--pull=never --read-only --cap-drop=all --security-opt no-new-privileges "${ULIMITS[@]}")
fails=0
pass() { printf '  ok   %s\n' "$*"; }
fail() { printf '  FAIL %s\n' "$*"; fails=$((fails + 1)); }
check() { local what=$1; shift; if "$@"; then pass "$what"; else fail "$what"; fi; }
host_pid=""
cleanup() {
  [[ -n $host_pid ]] && kill "$host_pid" 2>/dev/null
  "${PODMAN[@]}" rm -f -t 2 "$CTR" >/dev/null 2>&1 || true
  "${PODMAN[@]}" rmi -f "$NAME:test" "$DNAME:test" "$BASE:test" >/dev/null 2>&1 || true
  ip netns del "$NS" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
logs=""

# container_checks IMAGE: `version` in a read-only container with every capability dropped, then `serve` in a
# network namespace of this test: uid 65532, read-only root, /readyz over TLS, /livez, one AdmissionReview
# byte-identical to the bare binary's answer, no sanitizer report, exit 0 on SIGTERM.
container_checks() {
  local image=$1 want got pid ready resp patch ref
  echo "== $image: gpuslice version (read-only root, no capabilities)"
  want=$("$BIN" version)
  got=$("${PODMAN[@]}" run --rm "${RUNOPTS[@]}" --network none "$image" version 2>&1) || true
  check "version in the container: \"$got\" (binary: \"$want\")" test "$got" = "$want"

  echo "== $image: serve in network namespace $NS (webhook only, no API server)"
  ip netns del "$NS" 2>/dev/null || true
  ip netns add "$NS"
  ip netns exec "$NS" ip link set lo up
  rm -rf "$WORK/certs"; mkdir -p "$WORK/certs"
  "$BIN" certs --service gpuslice-webhook --namespace gpuslice-system --ip-san 127.0.0.1 --dns-san localhost \
    --out-dir "$WORK/certs" >/dev/null
  chown -R 65532:65532 "$WORK/certs"; chmod 0750 "$WORK/certs"
  local SERVE=(serve --enable-scheduler=false --tls-cert-file /etc/gpuslice/tls/tls.crt
         --tls-private-key-file /etc/gpuslice/tls/tls.key --webhook-bind-address 127.0.0.1:9443
         --health-bind-address 127.0.0.1:8080 --logging-format json)
  "${PODMAN[@]}" rm -f -t 2 "$CTR" >/dev/null 2>&1 || true
  "${PODMAN[@]}" run -d --name "$CTR" "${RUNOPTS[@]}" --network "ns:/run/netns/$NS" --tmpfs /tmp:rw,size=16m \
    -e ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}" -e UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}" \
    -v "$WORK/certs:/etc/gpuslice/tls:ro" "$image" "${SERVE[@]}" >/dev/null
  pid=$("${PODMAN[@]}" inspect "$CTR" --format '{{.State.Pid}}')
  check "serve runs as uid/gid 65532 (not root)" test "$(awk '/^Uid:/ {print $2} /^Gid:/ {print $2}' "/proc/$pid/status" | xargs)" = "65532 65532"
  check "its root filesystem is read-only" test "$("${PODMAN[@]}" inspect "$CTR" --format '{{.HostConfig.ReadonlyRootfs}}')" = true
  curl_ns() { ip netns exec "$NS" curl -s --max-time 5 --cacert "$WORK/certs/ca.crt" "$@"; }
  ready=""
  for _ in $(seq 100); do
    ready=$(curl_ns --resolve gpuslice-webhook.gpuslice-system.svc:9443:127.0.0.1 \
      https://gpuslice-webhook.gpuslice-system.svc:9443/readyz 2>/dev/null) && [[ -n $ready ]] && break
    sleep 0.2
  done
  check "/readyz over TLS with the caBundle's CA: \"$ready\"" test "$ready" = ok
  check "/livez on the plain health port" test "$(ip netns exec "$NS" curl -s --max-time 5 http://127.0.0.1:8080/livez)" = ok
  cat >"$WORK/review.json" <<'JSON'
{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":"6f1c7d7e-0000-4000-8000-000000000015",
 "kind":{"group":"","version":"v1","kind":"Pod"},"resource":{"group":"","version":"v1","resource":"pods"},
 "namespace":"team-a","operation":"CREATE","userInfo":{"username":"alice","groups":["system:authenticated"]},
 "object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"train","namespace":"team-a"},
  "spec":{"containers":[{"name":"cuda","image":"nvidia/cuda:12.4.1-base-ubuntu22.04",
   "resources":{"limits":{"nvidia.com/gpu":"1","nvidia.com/gpumem":"10000"}}}]}},"oldObject":null,"dryRun":false}}
JSON
  resp=$(curl_ns --resolve gpuslice-webhook.gpuslice-system.svc:9443:127.0.0.1 -H 'Content-Type: application/json' \
    --data-binary "@$WORK/review.json" https://gpuslice-webhook.gpuslice-system.svc:9443/mutate) || resp=""
  check "AdmissionReview: allowed, same uid, JSONPatch" \
    test "$(jq -r '[.response.allowed, .response.uid, .response.patchType] | join(" ")' <<<"$resp" 2>/dev/null)" = \
    "true 6f1c7d7e-0000-4000-8000-000000000015 JSONPatch"
  patch=$(jq -r '.response.patch' <<<"$resp" 2>/dev/null | base64 -d 2>/dev/null) || patch=""
  check "the patch sets schedulerName gpuslice-scheduler" \
    test "$(jq -r '.[] | select(.path == "/spec/schedulerName") | .value' <<<"$patch" 2>/dev/null)" = gpuslice-scheduler
  # The same binary, outside the image, on the host's loopback of the same namespace (other ports): same bytes.
  ip netns exec "$NS" "$BIN" serve --enable-scheduler=false --tls-cert-file "$WORK/certs/tls.crt" \
    --tls-private-key-file "$WORK/certs/tls.key" --webhook-bind-address 127.0.0.1:9444 --health-bind-address 127.0.0.1:8081 \
    >"$WORK/host-serve.log" 2>&1 &
  host_pid=$!
  for _ in $(seq 100); do curl_ns https://127.0.0.1:9444/readyz >/dev/null 2>&1 && break; sleep 0.2; done
  ref=$(curl_ns -H 'Content-Type: application/json' --data-binary "@$WORK/review.json" https://127.0.0.1:9444/mutate) || ref=""
  check "the container's AdmissionReview response is byte-identical to the binary's outside the image" \
    test -n "$ref" -a "$resp" = "$ref"
  kill "$host_pid" 2>/dev/null; wait "$host_pid" 2>/dev/null || true; host_pid=""
  "${PODMAN[@]}" stop -t 10 "$CTR" >/dev/null 2>&1 || true
  logs=$("${PODMAN[@]}" logs "$CTR" 2>&1) || true
  check "no sanitizer report in the container's log" \
    bash -c '! grep -qE "ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:" <<<"$1"' _ "$logs"
  check "the container exited 0 on SIGTERM" test "$("${PODMAN[@]}" inspect "$CTR" --format '{{.State.ExitCode}}' 2>/dev/null)" = 0
  "${PODMAN[@]}" rm -f -t 2 "$CTR" >/dev/null 2>&1 || true
  ip netns del "$NS" 2>/dev/null || true
}

export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
if [[ $ONLY != dockerfile ]]; then
echo "== image: build twice from $BIN"
t0=$SECONDS
image/build.sh --binary "$BIN" --out "$WORK/one" --tag test
t1=$SECONDS
image/build.sh --binary "$BIN" --out "$WORK/two" --tag test 2>&1 | tail -1
t2=$SECONDS
# shellcheck source=/dev/null
source "$WORK/one/image.env"
d1=$IMAGE_MANIFEST_DIGEST
d2=$(sed -n 's/^IMAGE_MANIFEST_DIGEST=//p' "$WORK/two/image.env")
printf '  built in %d s and %d s; manifest %s; layer %s B gzip, root %s B unpacked, binary %s B\n' \
  $((t1 - t0)) $((t2 - t1)) "$d1" "$IMAGE_LAYER_BYTES_COMPRESSED" "$IMAGE_ROOTFS_BYTES" "$IMAGE_BINARY_BYTES"
printf '  packages: %s\n' "$IMAGE_PACKAGES"
check "same inputs, same manifest digest ($d1 = $d2)" test "$d1" = "$d2"
check "same inputs, byte-identical oci-archive" cmp -s "$WORK/one/gpuslice-test.oci.tar" "$WORK/two/gpuslice-test.oci.tar"
# A changed input changes the digest (the check above cannot pass by ignoring its inputs).
SOURCE_DATE_EPOCH=$((SOURCE_DATE_EPOCH + 1)) image/build.sh --binary "$BIN" --out "$WORK/three" --tag test 2>&1 | tail -1
d3=$(sed -n 's/^IMAGE_MANIFEST_DIGEST=//p' "$WORK/three/image.env")
check "another SOURCE_DATE_EPOCH, another digest ($d3)" test "$d3" != "$d1"
rm -rf "$WORK/two" "$WORK/three"

echo "== image: config and contents"
skopeo copy --quiet "oci-archive:$WORK/one/gpuslice-test.oci.tar:test" "containers-storage:$NAME:test"
cfg=$("${PODMAN[@]}" image inspect "$NAME:test" --format '{{.Config.User}}|{{json .Config.Entrypoint}}|{{json .Config.Cmd}}')
check "user 65532:65532, entrypoint /usr/bin/gpuslice, cmd serve ($cfg)" test "$cfg" = '65532:65532|["/usr/bin/gpuslice"]|["serve"]'
layer=$(jq -r '.layers[0].digest' "$WORK/one/oci/blobs/sha256/${d1#sha256:}")
listing=$(tar -tzf "$WORK/one/oci/blobs/sha256/${layer#sha256:}")
check "no shell, no package manager in the layer" \
  bash -c '! grep -qE "^\./(usr/)?bin/(sh|bash|dash|apt|apt-get|dpkg)$" <<<"$1"' _ "$listing"
check "the binary and the sanitizer runtime ldd found are in the layer" \
  bash -c 'grep -qx "./usr/bin/gpuslice" <<<"$1" && { ! ldd "$2" | grep -q libasan || grep -q "libasan.so" <<<"$1"; }' _ "$listing" "$BIN"

container_checks "$NAME:test"
fi

if [[ $ONLY != umoci ]]; then
echo "== Dockerfile: podman build --pull=never --network none, FROM a Debian base of this machine's packages"
t0=$SECONDS
base_info=$(tests/image/host_debian_base.sh "$WORK/base.tar")
"${PODMAN[@]}" import "$WORK/base.tar" "$BASE:test" >/dev/null 2>&1
rm -f "$WORK/base.tar"
mapfile -t base_pkgs < <("${PODMAN[@]}" run --rm --network none "${ULIMITS[@]}" "$BASE:test" dpkg-query -W -f='${Package}\n' | sort)
printf '  base %s: %s (%d s)\n' "$BASE:test" "$base_info" $((SECONDS - t0))
arg_default() { sed -n "s/^ARG $1=\"\\(.*\\)\"\$/\\1/p" Dockerfile; }
runtime_pkgs=$(arg_default RUNTIME_PACKAGES) build_pkgs=$(arg_default BUILD_PACKAGES)
check "the Dockerfile names its runtime and build packages (ARG RUNTIME_PACKAGES, ARG BUILD_PACKAGES)" \
  test -n "$runtime_pkgs" -a -n "$build_pkgs"
# The packages owning the binary's shared libraries (as image/build.sh finds them), split into the sanitizer
# runtime (EXTRA_PACKAGES for this build) and the rest, which RUNTIME_PACKAGES (or the base) must cover.
owners=$(ldd "$BIN" | awk '/=> \// {print $3}' | while read -r l; do
  o=$(dpkg-query -S "$l" 2>/dev/null || dpkg-query -S "$(readlink -f "$l")" 2>/dev/null) && echo "${o%%:*}"; done | sort -u) || true
extra=$(grep -E '^lib(asan|ubsan|tsan|lsan|hwasan)[0-9]' <<<"$owners" | xargs) || true
missing=""
for p in $(grep -vE '^lib(asan|ubsan|tsan|lsan|hwasan)[0-9]' <<<"$owners"); do
  [[ " $runtime_pkgs " == *" $p "* ]] || printf '%s\n' "${base_pkgs[@]}" | grep -qxF "$p" || missing+=" $p"
done
check "RUNTIME_PACKAGES cover every library ldd finds besides the sanitizer runtime (missing:${missing:- none})" test -z "$missing"
unknown=""
for p in $build_pkgs $runtime_pkgs; do apt-cache show "$p" >/dev/null 2>&1 || unknown+=" $p"; done
check "every BUILD_PACKAGES and RUNTIME_PACKAGES name is a Debian package of this release (unknown:${unknown:- none})" test -z "$unknown"
# The local repository: the runtime packages, the sanitizer's and what they need beyond the base, at the host's
# versions, from image/build.sh's version-keyed cache (downloaded into it once when absent).
mkdir -p "$WORK/repo" "$CACHE"
need=$(tests/image/host_debian_base.sh --closure $runtime_pkgs $extra | grep -vxF -f <(printf '%s\n' "${base_pkgs[@]}") || true)
# A package whose host version the mirror no longer has (a security update since): the version image/build.sh
# cached instead, else the mirror's candidate (these libraries depend on the base's libc6/libstdc++6 only).
deb_of() {  # package -> a cached .deb of it, downloading it when there is none
  local p=$1 v f dl w
  v=$(dpkg-query -W -f='${Version}' "$p")
  f=$CACHE/$p/$v.deb
  [[ -s $f ]] || f=$(ls "$CACHE/$p"/*.deb 2>/dev/null | tail -1)
  [[ -n $f && -s $f ]] && { echo "$f"; return; }
  for w in "$v" "$(apt-cache policy "$p" | awk '/Candidate:/ {print $2}')"; do
    dl=$(mktemp -d "$CACHE/.dl.XXXXXX")
    if (cd "$dl" && apt-get download -qq -o APT::Sandbox::User=root "$p=$w" >/dev/null 2>&1); then
      mkdir -p "$CACHE/$p" && mv "$dl"/*.deb "$CACHE/$p/$w.deb" && rm -rf "$dl" && { echo "$CACHE/$p/$w.deb"; return; }
    fi
    rm -rf "$dl"
  done
  return 1
}
for p in $need; do
  if f=$(deb_of "$p"); then cp "$f" "$WORK/repo/${p}_$(basename "$f")"
  else fail "the .deb of $p (cache $CACHE, apt-get download)"; fi
done
(cd "$WORK/repo" && dpkg-scanpackages -m . /dev/null 2>/dev/null >Packages && gzip -9nk Packages)
printf '  local repository: %s\n' "$(cd "$WORK/repo" && ls ./*.deb | sed 's|^\./||' | xargs)"
mkdir -p "$WORK/ctx" && cp "$BIN" "$WORK/ctx/gpuslice"
t0=$SECONDS
if "${PODMAN[@]}" build --pull=never --network none "${ULIMITS[@]}" -v "$WORK/repo:/srv/debs:ro" \
     -f "$REPO/Dockerfile" --target prebuilt --build-arg DEBIAN="$BASE:test" \
     --build-arg GPUSLICE_BINARY=gpuslice --build-arg EXTRA_PACKAGES="$extra" -t "$DNAME:test" "$WORK/ctx" \
     >"$WORK/build.log" 2>&1; then
  pass "podman build of ./Dockerfile with no registry and no network ($((SECONDS - t0)) s; EXTRA_PACKAGES=\"$extra\")"
  size=$("${PODMAN[@]}" image inspect "$DNAME:test" --format '{{.Size}}')
  bsize=$("${PODMAN[@]}" image inspect "$BASE:test" --format '{{.Size}}')
  printf '  image %s: %s B (%d MiB), of which the base %s B (%d MiB), binary %s B\n' "$DNAME:test" "$size" \
    $((size / 1048576)) "$bsize" $((bsize / 1048576)) "$(stat -c %s "$BIN")"
  cfg=$("${PODMAN[@]}" image inspect "$DNAME:test" --format '{{.Config.User}}|{{json .Config.Entrypoint}}|{{json .Config.Cmd}}')
  check "user 65532:65532, entrypoint /usr/bin/gpuslice, cmd serve ($cfg)" test "$cfg" = '65532:65532|["/usr/bin/gpuslice"]|["serve"]'
  installed=$("${PODMAN[@]}" run --rm --network none "${ULIMITS[@]}" --entrypoint dpkg-query "$DNAME:test" -W -f='${Package} ' $runtime_pkgs $extra 2>&1) || true
  check "the image holds RUNTIME_PACKAGES and EXTRA_PACKAGES as installed packages" \
    test "$(xargs -n1 <<<"$installed" | sort | xargs)" = "$(xargs -n1 <<<"$runtime_pkgs $extra" | sort | xargs)"
  container_checks "$DNAME:test"
else
  fail "podman build of ./Dockerfile with no registry and no network" 
  tail -20 "$WORK/build.log"
fi
fi

if ((fails)); then echo "image_test: $fails check(s) failed"; printf '%s\n' "$logs" | tail -20; exit 1; fi
echo "image_test: all checks passed"
