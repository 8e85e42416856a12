#!/usr/bin/env bash
# Build the local stand-in for python:3.11-slim-bookworm that CI builds the Dockerfile from
# (`--build-arg BASE=localhost/base:bookworm`): no registry is reachable on the build machines
# (../shared/containers.md). Debian 12 minbase with python3 from the host's apt sources, plus what only
# this machine needs and the Dockerfile must never carry:
#   - the host's extra CA certificates, trusted system-wide, and a pip.conf pointing pip at that bundle
#     (the registries are reached through an intercepting proxy);
#   - `python3 -m venv /usr/local`: /usr/local/bin/python and pip as in the python:*-slim images
#     (Debian's python3 has no pip and refuses system installs, PEP 668);
#   - apt's Check-Valid-Until off, as on the host (its mirror serves a dated snapshot).
# Usage: tests/images/base-image.sh [TAG]   (default localhost/base:bookworm). The image is labelled
# with this script's sha256, so a test can tell a base built by an older version of it.
set -euo pipefail
tag=${1:-localhost/base:bookworm}
here=$(cd "$(dirname "$0")" && pwd)
sources=/etc/apt/sources.list.d/debian.sources
[ -r "$sources" ] || sources=/etc/apt/sources.list
for tool in mmdebstrap podman; do
  command -v "$tool" >/dev/null || {
    echo "$tool is missing: apt-get install -y --no-install-recommends podman runc mmdebstrap uidmap" >&2
    exit 1
  }
done
script_sha=$(sha256sum "$here/base-image.sh" | cut -d' ' -f1)
# mmdebstrap writes the root filesystem to a tarball under a directory of this run's, then podman
# imports it. mmdebstrap can fail at its very end on `umount ... target is busy` (a process of the
# chroot not gone yet) and pass when run again: a failed mmdebstrap is retried, at most $attempts runs
# in all, after its leftovers are cleaned up (never a failed import, which a retry would not mend).
attempts=3
work=$(mktemp -d "${TMPDIR:-/tmp}/base-image.XXXXXX")
clean() { # the paths under $work named by the arguments; mounts left under $work are unmounted first
  # (lazily: a busy one is detached) and rm never crosses into another filesystem, so a bind mount of
  # the host's /dev or /proc left behind by a failed run is never emptied
  findmnt -rn -o TARGET | awk -v p="$work/" 'index($0, p) == 1' | sort -r |
    while read -r mnt; do umount -l "$mnt" || true; done
  rm -rf --one-file-system "${@/#/$work/}"
}
trap 'clean tmp rootfs.tar; rmdir "$work"' EXIT
for attempt in $(seq "$attempts"); do
  mkdir -p "$work/tmp"
  if TMPDIR="$work/tmp" mmdebstrap --quiet --variant=minbase --include=python3,python3-venv,ca-certificates \
    --aptopt='Acquire::Check-Valid-Until "false"' \
    --customize-hook='for f in /usr/local/share/ca-certificates/*.crt; do [ -e "$f" ] && cp "$f" "$1/usr/local/share/ca-certificates/"; done; true' \
    --customize-hook='chroot "$1" update-ca-certificates >/dev/null 2>&1' \
    --customize-hook='chroot "$1" python3 -m venv /usr/local' \
    --customize-hook='printf "[global]\ncert = /etc/ssl/certs/ca-certificates.crt\ndisable-pip-version-check = true\ndefault-timeout = 180\n" > "$1/etc/pip.conf"' \
    --customize-hook='rm -rf "$1/var/cache/apt/archives/"*.deb "$1/var/lib/apt/lists/"*' \
    bookworm "$work/rootfs.tar" "$sources"; then
    break
  fi
  if [ "$attempt" -eq "$attempts" ]; then
    echo "base-image.sh: mmdebstrap failed $attempts times" >&2
    exit 1
  fi
  echo "base-image.sh: mmdebstrap failed (run $attempt of $attempts): cleaning up and running it again" >&2
  clean tmp rootfs.tar
done
podman import --quiet \
  --change 'ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change "LABEL io.graphtrain.base-script-sha256=$script_sha" \
  --change 'CMD ["python3"]' \
  "$work/rootfs.tar" "$tag" >/dev/null
echo "$tag"
