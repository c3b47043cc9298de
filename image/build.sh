#!/usr/bin/env bash
# Builds gpuslice's container image from an ALREADY BUILT binary and Debian packages, with no container
# registry and no base image: the Debian packages that own the binary's shared libraries (what `ldd` finds,
# nothing else: no shell, no package manager, no apt/dpkg state) are unpacked with dpkg-deb into an empty root,
# the binary and a non-root user (65532) are added, and umoci writes an OCI image with one layer.
#
#   image/build.sh --binary build/release/cmd/gpuslice --out build/image [--tag TAG]
#   podman load -i build/image/gpuslice-TAG.oci.tar     # or: skopeo copy oci-archive:... docker://REGISTRY/...
#   podman run --rm --read-only localhost/gpuslice:TAG version
#
# Output: OUT/oci (OCI layout, tag TAG, default the binary's version), OUT/gpuslice-TAG.oci.tar (oci-archive),
# OUT/image.env (manifest digest, layer sizes, package versions, the .debs' sha256).
#
# The .deb files come from the machine's apt sources (`apt-get download`, the same mirror lab/install-deps.sh
# installs from) and are kept in a cache keyed by package and exact version (GPUSLICE_IMAGE_CACHE, default
# ~/.cache/gpuslice-image/debs): after the first build no network is used. Each package is pinned to the
# host's installed version (the ABI the binary was linked and tested against) when the mirror or the cache
# has it, else the mirror's candidate (logged).
#
# Reproducible: the same binary, the same .deb files and the same SOURCE_DATE_EPOCH (default: the last
# commit's time) give the same manifest digest: every mtime is clamped, owners are numeric 0 (files) and
# order is sorted (GNU tar --sort=name, pax without atime/ctime), and umoci's gzip and JSON are deterministic
# (tests/image/image_test.sh builds twice and compares).
#
# A binary built with sanitizers (the asan preset, what CI builds) links libasan/libubsan: ldd finds them and
# the image then carries them too (and is much larger: see README "Container image").
# Needs root (files owned by root in the layer), umoci, dpkg-deb, apt-get, GNU tar, jq.
# For users with a registry and a Docker-compatible builder: ./Dockerfile.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
BINARY="" OUT="" TAG="" PINNED=true
CACHE=${GPUSLICE_IMAGE_CACHE:-$HOME/.cache/gpuslice-image/debs}
usage() { sed -n '2,29p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
die() { printf 'image/build.sh: %s\n' "$*" >&2; exit 1; }
log() { printf '[image %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
while (($#)); do
  case $1 in
    --binary) BINARY=${2:?--binary needs a path}; shift 2 ;;
    --out) OUT=${2:?--out needs a directory}; shift 2 ;;
    --tag) TAG=${2:?--tag needs a value}; shift 2 ;;
    --unpinned) PINNED=false; shift ;;
    -h|--help) usage ;;
    *) die "unknown argument \"$1\" (see --help)" ;;
  esac
done
[[ -n $BINARY ]] || die "--binary: the gpuslice binary to package is required (build it first: cmake --build --preset release)"
[[ -f $BINARY && -x $BINARY ]] || die "--binary: \"$BINARY\" is not an executable file"
[[ -n $OUT ]] || die "--out: an output directory is required"
[[ $(id -u) -eq 0 ]] || die "needs root (the layer's files are owned by root; run with sudo)"
for c in umoci dpkg-deb dpkg-query apt-get apt-cache tar jq sha256sum ldd; do
  command -v "$c" >/dev/null || die "$c is required (lab/install-deps.sh installs it)"
done
BINARY=$(readlink -f "$BINARY")
version=$("$BINARY" version 2>/dev/null | awk '{print $2}') || true
[[ -n $version ]] || die "--binary: \"$BINARY\" does not answer 'version' (not a gpuslice binary?)"
TAG=${TAG:-$version}
[[ $TAG =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$ ]] || die "--tag: \"$TAG\" is not a valid image tag"
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$REPO" log -1 --format=%ct 2>/dev/null || echo 0)}
[[ $SOURCE_DATE_EPOCH =~ ^[0-9]+$ ]] || die "SOURCE_DATE_EPOCH: \"$SOURCE_DATE_EPOCH\" is not a number of seconds"
arch=$(dpkg --print-architecture)

# ---- 1. the runtime packages: whoever owns the binary's shared libraries ----------------------------------
libs=$(ldd "$BINARY" | awk '/=> \// {print $3} /^[[:space:]]*\/[^ ]*ld-linux/ {print $1}' | sort -u)
[[ -n $libs ]] || die "ldd found no shared library in $BINARY (a static binary needs no packages: not supported here)"
declare -A seen=()
pkgs=()
for l in $libs; do
  r=$(readlink -f "$l")
  owner=$(dpkg-query -S "$l" 2>/dev/null || dpkg-query -S "$r" 2>/dev/null || dpkg-query -S "/usr$r" 2>/dev/null ||
          dpkg-query -S "${r#/usr}" 2>/dev/null) || die "no Debian package owns $l (built against a library outside Debian?)"
  p=${owner%%:*}; p=${p%%,*}
  [[ -n ${seen[$p]:-} ]] && continue
  seen[$p]=1; pkgs+=("$p")
done
mapfile -t pkgs < <(printf '%s\n' "${pkgs[@]}" | sort)

# ---- 2. the .deb files, from the version-keyed cache or the mirror ---------------------------------------
mkdir -p "$CACHE"
debs=() versions=()
# A machine whose apt lists were never fetched (a fresh container, a cleaned CI image) knows no mirror versions.
if ! compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null; then log "apt lists are empty: apt-get update"; apt-get update -qq; fi
cached_deb() { [[ -s $CACHE/$1/$2.deb ]] && echo "$CACHE/$1/$2.deb"; }   # package version -> cached file
on_mirror() { apt-cache madison "$1" | awk -F'|' '{gsub(/ /,"",$2); print $2}' | grep -qxF "$2"; }
for p in "${pkgs[@]}"; do
  host=$(dpkg-query -W -f='${Version}' "$p")
  v=$host
  if ! $PINNED || ! { cached_deb "$p" "$v" >/dev/null || on_mirror "$p" "$v"; }; then
    v=$(apt-cache policy "$p" | awk '/Candidate:/ {print $2}')
    [[ -n $v && $v != "(none)" ]] || die "package $p: no candidate version on the apt sources (apt-get update?)"
    $PINNED && log "  $p: the host's $host is no longer on the mirror: using $v"
  fi
  if ! f=$(cached_deb "$p" "$v"); then
    log "  downloading $p=$v into $CACHE/$p/"
    dl=$(mktemp -d "$CACHE/.dl.XXXXXX")
    (cd "$dl" && unset HTTPS_PROXY HTTP_PROXY https_proxy http_proxy &&
      apt-get download -qq -o APT::Sandbox::User=root "$p=$v" >/dev/null) || { rm -rf "$dl"; die "apt-get download $p=$v failed (apt-get update first?)"; }
    f=$(ls "$dl"/*.deb)
    [[ $(dpkg-deb -f "$f" Package) == "$p" && $(dpkg-deb -f "$f" Version) == "$v" ]] ||
      { rm -rf "$dl"; die "apt-get download $p=$v gave $(basename "$f")"; }
    mkdir -p "$CACHE/$p"; mv "$f" "$CACHE/$p/$v.deb"; rm -rf "$dl"
    f=$CACHE/$p/$v.deb
  fi
  debs+=("$f"); versions+=("$p=$v")
done
log "runtime packages: ${versions[*]}"

# ---- 3. the root filesystem -------------------------------------------------------------------------------
work=$(mktemp -d "${TMPDIR:-/tmp}/gpuslice-image.XXXXXX")
trap 'rm -rf "$work"' EXIT
root=$work/rootfs
mkdir -p "$root"
for f in "${debs[@]}"; do dpkg-deb -x "$f" "$root"; done
# Debian 12 is merged-/usr: the loader path /lib64 and /lib are links into /usr (base-files makes them; we
# do not install base-files).
for d in lib lib64 bin sbin; do
  if [[ -d $root/$d && ! -L $root/$d ]]; then mkdir -p "$root/usr/$d"; cp -a "$root/$d/." "$root/usr/$d/"; rm -rf "${root:?}/$d"; fi
  [[ -e $root/$d ]] || ln -s "usr/$d" "$root/$d"
done
# Only what runs: libraries, the loader, the binary. No docs, no static archives, no programs.
rm -rf "$root"/usr/share/{doc,man,info,lintian,locale,bug,gcc,gdb} "$root"/usr/lib/x86_64-linux-gnu/gconv \
  "$root"/usr/lib/ssl/misc "$root"/usr/bin "$root"/usr/sbin "$root"/usr/libexec "$root"/etc/ld.so.conf.d \
  "$root"/var 2>/dev/null || true
find "$root" -name '*.a' -delete
mkdir -p "$root"/{tmp,etc/gpuslice,dev,proc,sys,run,usr/bin}
chmod 1777 "$root/tmp"
install -m 0755 "$BINARY" "$root/usr/bin/gpuslice"
printf 'root:x:0:0:root:/:/usr/sbin/nologin\nnonroot:x:65532:65532:gpuslice:/nonexistent:/usr/sbin/nologin\n' >"$root/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$root/etc/group"
printf 'hosts: files dns\n' >"$root/etc/nsswitch.conf"
printf '%s\n' "${versions[@]}" >"$root/etc/gpuslice/image-packages"
# Every library ldd saw on the host must resolve inside the root.
for l in $libs; do [[ -e $root$l || -e $root$(readlink -f "$l") ]] || die "the image root lacks $l after unpacking"; done

# ---- 4. one deterministic layer ---------------------------------------------------------------------------
find "$root" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
(cd "$root" && tar --sort=name --format=pax --numeric-owner --owner=0 --group=0 --mtime="@$SOURCE_DATE_EPOCH" \
   --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime -cf "$work/layer.tar" .)
diff_id=sha256:$(sha256sum <"$work/layer.tar" | cut -d' ' -f1)

# ---- 5. the OCI image (umoci) -----------------------------------------------------------------------------
created=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
rm -rf "$OUT/oci"; mkdir -p "$OUT"
umoci init --layout "$OUT/oci"
umoci new --image "$OUT/oci:$TAG"
umoci raw add-layer --image "$OUT/oci:$TAG" --history.created "$created" --history.author gpuslice \
  --history.created_by "image/build.sh (Debian packages: ${versions[*]}; /usr/bin/gpuslice)" "$work/layer.tar"
umoci config --no-history --image "$OUT/oci:$TAG" --created "$created" \
  --author gpuslice --architecture "$arch" --os linux \
  --config.user 65532:65532 --config.workingdir / \
  --config.entrypoint /usr/bin/gpuslice --config.cmd serve \
  --config.exposedports 9443/tcp --config.exposedports 8080/tcp \
  --config.env PATH=/usr/bin \
  --config.label org.opencontainers.image.title=gpuslice \
  --config.label org.opencontainers.image.version="$version" \
  --config.label org.opencontainers.image.created="$created" \
  --config.label org.opencontainers.image.base.name="none (Debian packages: ${versions[*]})" \
  --manifest.annotation org.opencontainers.image.version="$version" \
  --manifest.annotation org.opencontainers.image.created="$created"
umoci gc --layout "$OUT/oci"
manifest=$(jq -r --arg t "$TAG" '.manifests[] | select(.annotations["org.opencontainers.image.ref.name"] == $t) | .digest' "$OUT/oci/index.json")
[[ -n $manifest ]] || die "umoci wrote no manifest for tag $TAG"
mf=$OUT/oci/blobs/sha256/${manifest#sha256:}
got_diff=$(jq -r '.rootfs.diff_ids[0]' "$OUT/oci/blobs/sha256/$(jq -r '.config.digest' "$mf" | cut -d: -f2)")
[[ $got_diff == "$diff_id" ]] || die "layer diff_id $got_diff != the tar's $diff_id"
layer_size=$(jq -r '.layers[0].size' "$mf")
# The oci-archive: the layout as one tar (podman load -i, skopeo copy oci-archive:FILE:TAG ...).
(cd "$OUT/oci" && find . -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} + &&
  tar --sort=name --format=pax --numeric-owner --owner=0 --group=0 --mtime="@$SOURCE_DATE_EPOCH" \
    --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime -cf "../gpuslice-$TAG.oci.tar" .)
unpacked=$(du -sb "$root" | cut -f1)
deb_sums=$(for i in "${!debs[@]}"; do printf '%s:sha256:%s ' "${versions[$i]}" "$(sha256sum <"${debs[$i]}" | cut -d' ' -f1)"; done)
{
  printf 'IMAGE_TAG=%q\nIMAGE_MANIFEST_DIGEST=%q\nIMAGE_LAYER_DIFF_ID=%q\n' "$TAG" "$manifest" "$diff_id"
  printf 'IMAGE_LAYER_BYTES_COMPRESSED=%s\nIMAGE_ROOTFS_BYTES=%s\nIMAGE_SOURCE_DATE_EPOCH=%s\n' "$layer_size" "$unpacked" "$SOURCE_DATE_EPOCH"
  printf 'IMAGE_BINARY_BYTES=%s\nIMAGE_BINARY_SHA256=%q\n' "$(stat -c %s "$BINARY")" "$(sha256sum <"$BINARY" | cut -d' ' -f1)"
  printf 'IMAGE_PACKAGES=%q\nIMAGE_DEBS=%q\n' "${versions[*]}" "${deb_sums% }"
} >"$OUT/image.env"
log "image gpuslice:$TAG $manifest: layer $((layer_size / 1048576)) MiB compressed, root $((unpacked / 1048576)) MiB unpacked (binary $(($(stat -c %s "$BINARY") / 1048576)) MiB)"
log "  layout $OUT/oci, archive $OUT/gpuslice-$TAG.oci.tar"
