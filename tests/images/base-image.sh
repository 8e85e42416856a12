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
mmdebstrap --quiet --variant=minbase --include=python3,python3-venv,ca-certificates \
  --aptopt='Acquire::Check-Valid-Until "false"' \
  --customize-hook='for f in /usr/local/share/ca-certificates/*.crt; do [ -e "$f" ] && cp "$f" "$1/usr/local/share/ca-certificates/"; done; true' \
  --customize-hook='chroot "$1" update-ca-certificates >/dev/null 2>&1' \
  --customize-hook='chroot "$1" python3 -m venv /usr/local' \
  --customize-hook='printf "[global]\ncert = /etc/ssl/certs/ca-certificates.crt\ndisable-pip-version-check = true\ndefault-timeout = 180\n" > "$1/etc/pip.conf"' \
  --customize-hook='rm -rf "$1/var/cache/apt/archives/"*.deb "$1/var/lib/apt/lists/"*' \
  bookworm - "$sources" |
  podman import --quiet \
    --change 'ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change "LABEL io.graphtrain.base-script-sha256=$script_sha" \
    --change 'CMD ["python3"]' \
    - "$tag" >/dev/null
echo "$tag"
