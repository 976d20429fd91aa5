#!/usr/bin/env bash
# Assembles the minimal root filesystem the RustQueue images run on, from real Debian packages
# of the machine's own release (the one the binaries were linked against):
#
#   - the packages owning every shared library the given binaries load (`ldd` + `dpkg -S`;
#     for our binaries: libc6 and libgcc-s1), plus ca-certificates, netbase and base-files;
#   - each package unpacked with `dpkg-deb -x` (no maintainer scripts run), its control data
#     in /var/lib/dpkg/status.d/<pkg> so image scanners can list what is inside;
#   - /etc/ssl/certs/ca-certificates.crt (what update-ca-certificates would have generated);
#   - /etc/passwd and /etc/group with root and nonroot (65532), /home/nonroot, /tmp (1777);
#   - documentation, man pages and locales dropped, copyright files kept.
#
# No shell and no package manager end up in the image. Used by scripts/build-images.sh and by
# the Dockerfile, so both produce the same layout.
#
# Usage: images/rootfs.sh <dest dir> <deb cache dir> <binary>...
set -euo pipefail

dest=$1 debs=$2
shift 2
[ $# -gt 0 ] || { echo "usage: $0 <dest> <deb cache> <binary>..." >&2; exit 2; }
mkdir -p "$dest" "$debs"

# Packages owning the binaries' shared libraries, resolved to the real paths dpkg knows.
packages=(ca-certificates netbase base-files)
for bin in "$@"; do
  while read -r lib; do
    real=$(readlink -f "$lib")
    for candidate in "$lib" "$real" "${real/#\/usr/}"; do
      if owner=$(dpkg -S "$candidate" 2>/dev/null); then
        packages+=("${owner%%:*}")
        break
      fi
    done || true
  done < <(ldd "$bin" | grep -o '/[^ ]*' | sort -u)
done
mapfile -t packages < <(printf '%s\n' "${packages[@]}" | sed 's/,.*//' | sort -u)

for pkg in "${packages[@]}"; do
  # The release's current version (installed libraries may lag it; a stable update keeps the
  # ABI), so the download always exists.
  version=$(apt-cache policy "$pkg" | sed -n 's/^  Candidate: //p')
  [ -n "$version" ] && [ "$version" != "(none)" ] ||
    { echo "error: apt knows no $pkg (run apt-get update)" >&2; exit 1; }
  arch=$(apt-cache show "$pkg=$version" | sed -n 's/^Architecture: //p' | head -1)
  deb="$debs/${pkg}_${version//:/%3a}_$arch.deb"
  if [ ! -f "$deb" ]; then
    (cd "$debs" && apt-get download -qq -o APT::Sandbox::User=root "$pkg=$version" >/dev/null)
  fi
  [ -f "$deb" ] || { echo "error: apt-get download $pkg=$version gave no $deb" >&2; exit 1; }
  dpkg-deb -x "$deb" "$dest"
  mkdir -p "$dest/var/lib/dpkg/status.d"
  dpkg-deb -f "$deb" >"$dest/var/lib/dpkg/status.d/$pkg"
  echo "$pkg $version"
done

# What the maintainer scripts would have done, and the users.
mkdir -p "$dest/etc/ssl/certs" "$dest/tmp" "$dest/home/nonroot"
find "$dest/usr/share/ca-certificates" -name '*.crt' | sort |
  xargs cat >"$dest/etc/ssl/certs/ca-certificates.crt"
printf '%s\n' 'root:x:0:0:root:/root:/sbin/nologin' \
  'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin' >"$dest/etc/passwd"
printf '%s\n' 'root:x:0:' 'nonroot:x:65532:' >"$dest/etc/group"
printf '%s\n' 'hosts: files dns' 'networks: files' >"$dest/etc/nsswitch.conf"

# Trim what a static binary never reads; keep the licenses.
find "$dest/usr/share/doc" -mindepth 2 ! -name copyright -delete 2>/dev/null || true
rm -rf "$dest/usr/share/man" "$dest/usr/share/locale" "$dest/usr/share/lintian" \
  "$dest/usr/share/info" "$dest/usr/lib/x86_64-linux-gnu/gconv" "$dest/etc/profile.d" \
  "$dest/usr/share/base-files/dot.bashrc" "$dest/usr/share/base-files/dot.profile"*
# Nothing in the image may be a shell or an interpreter (base-files ships none; be sure).
rm -f "$dest/bin/sh" "$dest/usr/bin/sh"

chown -R 0:0 "$dest"
chown 65532:65532 "$dest/home/nonroot"
chmod 1777 "$dest/tmp"
chmod 0755 "$dest/home/nonroot"
