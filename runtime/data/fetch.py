"""Download pinned packages from the package registries (Debian's archive, PyPI) into the cache.

Every package is pinned by version *and* sha256, so a mirror serving something else is refused rather
than parsed. Debian packages are fetched over HTTP from the mirror's pool (no apt state, no root, nothing
installed) and unpacked in Python (a .deb is an `ar` archive holding data.tar.xz); wheels are fetched
with pip, so the user's index configuration (mirrors, proxies) applies.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from graphtrain.runtime.data.cache import atomic_file, make_dirs, sha256_file
from graphtrain.runtime.errors import ChecksumError, DataError, FetchError
from graphtrain.runtime.progress import progress

ENV_MIRROR = "GRAPHTRAIN_DEBIAN_MIRROR"
DEBIAN_MIRRORS = (
    "http://deb.debian.org/debian",
    "https://snapshot.debian.org/archive/debian/20250520T000000Z",
)
TIMEOUT_SECONDS = 60


@dataclass(frozen=True)
class Package:
    """A pinned registry artefact: a Debian .deb (by pool path) or a PyPI wheel (by requirement)."""

    name: str
    version: str
    filename: str
    sha256: str
    size: int
    pool_path: str | None = None  # Debian: path under the mirror root
    requirement: str | None = None  # PyPI: what pip downloads

    @property
    def registry(self) -> str:
        return "debian" if self.pool_path else "pypi"


WORDNET_BASE = Package(
    name="wordnet-base",
    version="1:3.0-37",
    filename="wordnet-base_3.0-37_all.deb",
    sha256="61060d960f9ada8fa120872312eccd3ecebfbab8c4579e4f5a74e1cf67620752",
    size=6467132,
    pool_path="pool/main/w/wordnet/wordnet-base_3.0-37_all.deb",
)
ORG_HS_EG_DB = Package(
    name="r-bioc-org.hs.eg.db",
    version="3.16.0-1",
    filename="r-bioc-org.hs.eg.db_3.16.0-1_all.deb",
    sha256="0f61810d35b858915b1a9787d8dcab08b7e164c14c20a9e1d86eb9837308c2c2",
    size=37263300,
    pool_path="pool/main/r/r-bioc-org.hs.eg.db/r-bioc-org.hs.eg.db_3.16.0-1_all.deb",
)
GO_DB = Package(
    name="r-bioc-go.db",
    version="3.16.0-1",
    filename="r-bioc-go.db_3.16.0-1_all.deb",
    sha256="6cf9c43b97212811ecb7ad0d7cde12e76f984ab7494a59c02455239a9dd3243d",
    size=12359372,
    pool_path="pool/main/r/r-bioc-go.db/r-bioc-go.db_3.16.0-1_all.deb",
)
LIBMETIS_DOC = Package(
    name="libmetis-doc",
    version="5.1.0.dfsg-7",
    filename="libmetis-doc_5.1.0.dfsg-7_all.deb",
    sha256="1a1ec91160520e1fa16f82fa62e195811b5afc6521a17b3e6ebad9e560c45c5c",
    size=3337048,
    pool_path="pool/main/m/metis/libmetis-doc_5.1.0.dfsg-7_all.deb",
)
PYKEEN_WHEEL = Package(
    name="pykeen",
    version="1.11.1",
    filename="pykeen-1.11.1-py3-none-any.whl",
    sha256="b6cc0ab012fc6ba4f37b58fb7081a409a5c1f04cbbb0e0e9c2256e911757d4ba",
    size=730295,
    requirement="pykeen==1.11.1",
)


def mirrors() -> list[str]:
    env = os.environ.get(ENV_MIRROR)
    return [env.rstrip("/")] if env else list(DEBIAN_MIRRORS)


def download(pkg: Package, downloads: Path) -> Path:
    """Return the verified local copy of `pkg`, downloading it if it is not cached yet.

    Raises:
        FetchError: no mirror could serve it.
        ChecksumError: the bytes served do not have the pinned sha256.
        DataError: the download directory cannot be created.
    """
    make_dirs(downloads)
    target = downloads / pkg.filename
    if target.exists():
        if sha256_file(target) == pkg.sha256:
            return target
        target.unlink()  # a corrupt or truncated earlier download: fetch again
    if pkg.pool_path:
        _download_deb(pkg, target)
    else:
        _download_wheel(pkg, target)
    return target


def _download_deb(pkg: Package, target: Path) -> None:
    errors = []
    for mirror in mirrors():
        url = f"{mirror}/{pkg.pool_path}"
        try:
            _http_get(url, target, pkg)
            return
        except ChecksumError:
            raise
        except (urllib.error.URLError, OSError, TimeoutError, _BrokenDownload) as exc:
            errors.append(f"{url}: {exc}")
    raise FetchError(f"could not download {pkg.name} {pkg.version}: " + "; ".join(errors))


class _BrokenDownload(Exception):
    """The connection failed mid-download: try the next mirror. Not an OSError, which atomic_file would
    report as a failure to write the file."""


def _read(resp: Any) -> bytes:
    try:
        return bytes(resp.read(1 << 20))
    except (OSError, TimeoutError) as exc:
        raise _BrokenDownload(str(exc) or type(exc).__name__) from None


def _http_get(url: str, target: Path, pkg: Package) -> None:
    digest = hashlib.sha256()
    with urllib.request.urlopen(url, timeout=TIMEOUT_SECONDS) as resp, atomic_file(target) as out:
        total = int(resp.headers.get("Content-Length") or pkg.size)
        with progress() as bar:
            task = bar.add_task(f"download {pkg.filename}", total=total)
            while chunk := _read(resp):
                digest.update(chunk)
                out.write(chunk)
                bar.advance(task, len(chunk))
        if digest.hexdigest() != pkg.sha256:  # inside: the download is never renamed into place
            raise ChecksumError(f"{url}: sha256 {digest.hexdigest()} is not the pinned {pkg.sha256}")


def _download_wheel(pkg: Package, target: Path) -> None:
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        cmd = [
            sys.executable,
            "-P",  # not pip from the working directory (see launch/plan.entry)
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "-q",
            "-d",
            tmp,
            pkg.requirement or f"{pkg.name}=={pkg.version}",
        ]
        try:
            subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=600)
        except subprocess.CalledProcessError as exc:
            raise FetchError(
                f"pip could not download {pkg.requirement}: {exc.stderr.strip()[-500:]}"
            ) from None
        except subprocess.TimeoutExpired:
            raise FetchError(f"pip download of {pkg.requirement} timed out") from None
        got = Path(tmp) / pkg.filename
        if not got.exists():
            raise FetchError(f"pip did not produce {pkg.filename} (got {os.listdir(tmp)})")
        actual = sha256_file(got)
        if actual != pkg.sha256:
            raise ChecksumError(f"{pkg.filename}: sha256 {actual} is not the pinned {pkg.sha256}")
        shutil.move(got, target)


def _ar_members(data: bytes) -> dict[str, bytes]:
    """Members of a System V `ar` archive (the container format of .deb)."""
    if data[:8] != b"!<arch>\n":
        raise DataError("not a Debian package (ar magic missing)")
    pos, out = 8, {}
    while pos + 60 <= len(data):
        header = data[pos : pos + 60]
        name = header[:16].decode("ascii").strip().rstrip("/")
        size = int(header[48:58].decode("ascii").strip())
        pos += 60
        out[name] = data[pos : pos + size]
        pos += size + (size & 1)
    return out


def extract_deb(deb: Path, members: dict[str, Path]) -> None:
    """Extract the named files of a .deb's data archive to the given paths.

    `members` maps the path inside the package (e.g. 'usr/share/wordnet/data.noun') to its destination.

    Raises:
        DataError: the package is malformed or lacks one of the files.
    """
    parts = _ar_members(deb.read_bytes())
    data_name = next((n for n in parts if n.startswith("data.tar")), None)
    if data_name is None:
        raise DataError(f"{deb}: no data.tar.* member")
    wanted = {k.lstrip("./"): v for k, v in members.items()}
    with tarfile.open(fileobj=io.BytesIO(parts[data_name]), mode="r:*") as tar:
        for member in tar:
            key = member.name.lstrip("./")
            if key in wanted and member.isfile():
                src = tar.extractfile(member)
                assert src is not None
                wanted[key].parent.mkdir(parents=True, exist_ok=True)
                with open(wanted[key], "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
                del wanted[key]
    if wanted:
        raise DataError(f"{deb}: missing {sorted(wanted)}")
