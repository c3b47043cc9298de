#!/usr/bin/env bash
# A Debian base image for the Dockerfile test, made with no registry and no network from this machine's own
# installed packages (a Debian 12 host): the Essential and Priority-required packages plus apt and their
# Depends/Pre-Depends closure, each package's files as `dpkg-query -L` lists them (merged /usr: paths through
# /bin, /lib, /lib64, /sbin are stored under usr/), with their dpkg status, file lists and diversions, so that
# apt and dpkg inside it see a consistent installed system (what debian:bookworm-slim is, built otherwise).
# apt's only source is a local repository, REPO_DIR mounted at /srv/debs (`deb [trusted=yes] file:/srv/debs ./`):
# the Dockerfile's `apt-get update && apt-get install` then runs unchanged, with --network none.
#
#   tests/image/host_debian_base.sh OUT.tar      # a root filesystem tarball for `podman import`
#   tests/image/host_debian_base.sh --closure PKG...   # print PKG's installed Depends/Pre-Depends closure
#
# Needs dpkg-query and GNU tar; reads only the host's dpkg database and files.
set -euo pipefail
die() { printf 'host_debian_base.sh: %s\n' "$*" >&2; exit 1; }

# closure PKG...: the installed packages PKG... need (Depends and Pre-Depends, alternatives: the installed one),
# PKG included, one per line, sorted.
installed() { [[ $(dpkg-query -W -f='${db:Status-Abbrev}' "$1" 2>/dev/null) == ii* ]]; }
closure() {
  local -A seen=()
  local queue=("$@") p deps d alt
  while ((${#queue[@]})); do
    p=${queue[0]}; queue=("${queue[@]:1}")
    p=${p%%:*}
    [[ -n ${seen[$p]:-} ]] && continue
    installed "$p" || continue
    seen[$p]=1
    deps=$(dpkg-query -W -f='${Depends}, ${Pre-Depends}' "$p")
    IFS=',' read -ra ds <<<"$deps"
    for d in "${ds[@]}"; do
      IFS='|' read -ra alts <<<"$d"
      for alt in "${alts[@]}"; do
        alt=$(awk '{print $1}' <<<"$alt"); alt=${alt%%:*}
        [[ -z $alt ]] && continue
        if installed "$alt"; then queue+=("$alt"); break; fi
        # A virtual package: whoever installed provides it.
        prov=$(dpkg-query -W -f='${Package} ${Provides}\n' 2>/dev/null | awk -v v="$alt" '{for (i = 2; i <= NF; i++) {gsub(/[,(].*/, "", $i); if ($i == v && !found) {print $1; found = 1}}}') || true
        [[ -n $prov ]] && { queue+=("$prov"); break; }
      done
    done
  done
  printf '%s\n' "${!seen[@]}" | sort
}

if [[ ${1:-} == --closure ]]; then shift; closure "$@"; exit 0; fi
OUT=${1:?usage: host_debian_base.sh OUT.tar}
[[ -f /etc/debian_version ]] || die "not a Debian host (no /etc/debian_version)"
[[ -L /bin && -L /lib ]] || die "the host is not merged-/usr (/bin and /lib are not links): not supported"

mapfile -t seeds < <(dpkg-query -W -f='${Package} ${Essential} ${Priority} ${db:Status-Abbrev}\n' |
  awk '$4 == "ii" && ($2 == "yes" || $3 == "required") {print $1}')
mapfile -t pkgs < <(closure "${seeds[@]}" apt)
work=$(mktemp -d "${TMPDIR:-/tmp}/gpuslice-debian-base.XXXXXX")
trap 'rm -rf "$work"' EXIT
root=$work/root
mkdir -p "$root"/{usr/bin,usr/lib,usr/lib64,usr/sbin,var/lib/dpkg/info,var/lib/dpkg/updates,var/lib/apt/lists/partial,var/cache/apt/archives/partial,etc/apt/sources.list.d,etc/apt/apt.conf.d,tmp,root,srv/debs,dev,proc,sys,run}
for d in bin lib lib64 sbin; do ln -s "usr/$d" "$root/$d"; done
chmod 1777 "$root/tmp"

# Every file of the packages, through the merged-/usr links (each path's directory resolved, so usr/bin/bash is
# stored, not bin/bash; directories as entries of their own), copied by one tar pipe.
{ dpkg-query -L "${pkgs[@]}" 2>/dev/null || true; } | python3 -c '
import os, sys
out = set()
for line in sys.stdin:
    f = line.rstrip("\n")
    if not f.startswith("/") or not os.path.lexists(f):
        continue  # a path dpkg lists that the host removed (docs, locales)
    r = os.path.join(os.path.realpath(os.path.dirname(f)), os.path.basename(f))
    out.add(r.lstrip("/"))
sys.stdout.write("".join(p + "\0" for p in sorted(out)))
' >"$work/files"
tar -C / --null --no-recursion -T "$work/files" -cf - | tar -C "$root" -xpf -
# dpkg's view of them: status records, file lists and scripts, diversions among these packages.
dpkg-query -s "${pkgs[@]}" >"$root/var/lib/dpkg/status" 2>/dev/null
for p in "${pkgs[@]}"; do
  cp -a /var/lib/dpkg/info/"$p".* /var/lib/dpkg/info/"$p":*.* "$root/var/lib/dpkg/info/" 2>/dev/null || true
done
cp /var/lib/dpkg/info/format "$root/var/lib/dpkg/info/format"   # "1": multiarch names (libc6:amd64.list)
: >"$root/var/lib/dpkg/available"
declare -A inset=(); for p in "${pkgs[@]}"; do inset[$p]=1; done
if [[ -f /var/lib/dpkg/diversions ]]; then
  while IFS= read -r from && IFS= read -r to && IFS= read -r by; do
    [[ -n ${inset[$by]:-} ]] && printf '%s\n%s\n%s\n' "$from" "$to" "$by"
  done </var/lib/dpkg/diversions >"$root/var/lib/dpkg/diversions"
fi
# Accounts as base-passwd ships them, plus apt's sandbox user; no host account or secret is copied.
cp /usr/share/base-passwd/passwd.master "$root/etc/passwd"
cp /usr/share/base-passwd/group.master "$root/etc/group"
echo '_apt:x:42:65534::/nonexistent:/usr/sbin/nologin' >>"$root/etc/passwd"
awk -F: '{print $1 ":*:19000:0:99999:7:::"}' "$root/etc/passwd" >"$root/etc/shadow"; chmod 640 "$root/etc/shadow"
# Only the local repository: no mirror, no proxy, no host apt configuration.
rm -f "$root"/etc/apt/sources.list "$root"/etc/apt/sources.list.d/* "$root"/etc/apt/apt.conf.d/*proxy* 2>/dev/null || true
echo 'deb [trusted=yes] file:/srv/debs ./' >"$root/etc/apt/sources.list.d/local.list"
printf 'Acquire::Languages "none";\n' >"$root/etc/apt/apt.conf.d/90gpuslice-test"
echo 'debian-base-test' >"$root/etc/hostname"
tar -C "$root" --numeric-owner -cf "$OUT" .
printf '%s packages, %s bytes\n' "${#pkgs[@]}" "$(du -sb "$root" | cut -f1)"
