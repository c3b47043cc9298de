#!/usr/bin/env bash
# Installs every Debian 12 package gpuslice needs to build, test, fuzz, benchmark and run the lab.
# Idempotent and fast when everything is present: dpkg-query decides, and apt-get runs (update once, then
# install) only for what is missing.
#
#   sudo lab/install-deps.sh           # install what is missing
#   lab/install-deps.sh --check        # list what is missing, exit 1 if anything is (no root needed)
set -euo pipefail

PACKAGES=(
  # toolchains and build
  build-essential cmake ninja-build g++-12 clang-14 libclang-rt-14-dev clang-format-14 pkg-config git ca-certificates
  # libraries
  libboost1.81-dev libboost-json1.81-dev libssl-dev libyaml-cpp-dev catch2 libcli11-dev
  libfmt-dev nlohmann-json3-dev zlib1g-dev
  # lab and e2e: network namespaces, Unix-socket bridges, Debian's etcd (fallback), HTTP tools, load generator
  iproute2 socat etcd-server curl openssl wrk jq python3 python3-yaml procps psmisc util-linux
  # chaos e2e: the path to the API server cut by dropping packets inside a network namespace
  iptables
  # e2e of the status page: Debian's chromium, headless (tests/e2e/status_page_test.sh)
  chromium
  # the container image (image/build.sh: umoci; tests/image/image_test.sh: podman with runc, skopeo)
  umoci podman runc skopeo
)

check_only=false
[[ ${1:-} == --check ]] && check_only=true

missing=()
for p in "${PACKAGES[@]}"; do
  # "install ok installed" is the only state that counts; half-configured packages are reinstalled.
  if [[ $(dpkg-query -W -f='${Status}' "$p" 2>/dev/null) != "install ok installed" ]]; then
    missing+=("$p")
  fi
done

# Go builds the lab's upstream binaries; Debian 12's golang (1.19) is too old for Kubernetes 1.34 (needs 1.24+),
# so an existing newer go on PATH wins and Debian's golang is installed only when no go exists at all.
need_go=false
if ! command -v go >/dev/null 2>&1 && [[ ! -x /usr/local/go/bin/go ]]; then
  need_go=true
  missing+=(golang)
fi

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi
echo "install-deps: missing: ${missing[*]}"
$check_only && exit 1

if [[ $(id -u) -ne 0 ]]; then
  echo "install-deps: must run as root to install packages (try: sudo $0)" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
if $need_go; then
  v=$(go version 2>/dev/null | awk '{print $3}')
  echo "install-deps: installed Debian's Go ($v); lab/build-tools.sh needs Go >= 1.24 (1.26 for kwok v0.8.0)." >&2
  echo "install-deps: if it is older, install a newer Go from https://go.dev/dl into /usr/local/go." >&2
fi
echo "install-deps: done"
