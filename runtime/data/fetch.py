"""Download pinned packages from the package registries (Debian's archive, PyPI) into the cache.

Every package is pinned by version *and* sha256, so a mirror serving something else is refused rather
than parsed. Debian packages are fetched over HTTP from the mirror's pool (no apt state, no root, nothing
installed) and unpacked in Python (a .deb is an `ar` archive holding data.tar.xz); wheels are fetched
with pip, so the user's index configuration (pip config, $PIP_INDEX_URL, proxies) applies.

No mirror host is named here: the Debian mirrors are the machine's own, from its apt sources
(/etc/apt/sources.list.d/*.sources in deb822 form, and the one-line /etc/apt/sources.list), so a
corporate mirror or proxy configured for apt serves these downloads too; $GRAPHTRAIN_DEBIAN_MIRROR
overrides them (a machine without apt, or a snapshot mirror holding an older pinned version).
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
APT_SOURCES = (Path("/etc/apt/sources.list"), Path("/etc/apt/sources.list.d"))
_SCHEMES = ("http://", "https://", "file:")  # apt's cdrom:, mirror+, tor+ ... are not fetched here
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


def mirrors(sources: tuple[Path, ...] | None = None) -> list[str]:
    """Where Debian packages come from: $GRAPHTRAIN_DEBIAN_MIRROR, else the machine's apt sources
    (`sources`, default APT_SOURCES), in the order apt reads them."""
    env = os.environ.get(ENV_MIRROR)
    if env:
        return [env.rstrip("/")]
    found: list[str] = []
    for path in APT_SOURCES if sources is None else sources:
        files = sorted(path.glob("*.list")) + sorted(path.glob("*.sources")) if path.is_dir() else [path]
        for f in files:
            try:
                text = f.read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue  # absent or unreadable: not a source
            parse = parse_deb822 if f.suffix == ".sources" else parse_sources_list
            found += [u for u in parse(text) if u not in found]
    return found


def _archive(uri: str, suites: list[str]) -> str | None:
    """`uri` (without a trailing /) if it is a fetchable archive holding packages, not only security
    updates (whose pool lacks the pinned versions)."""
    uri = uri.rstrip("/")
    if not uri.startswith(_SCHEMES) or (suites and all(s.endswith("-security") for s in suites)):
        return None
    return uri


def parse_sources_list(text: str) -> list[str]:
    """Archive URIs of one-line apt sources: `deb [options] URI suite [components]`."""
    out = []
    for line in text.splitlines():
        fields = line.split("#", 1)[0].split()
        if not fields or fields[0] != "deb":
            continue
        rest = fields[1:]
        if rest and rest[0].startswith("["):  # [arch=amd64 signed-by=...]
            while rest and not rest[0].endswith("]"):
                rest = rest[1:]
            rest = rest[1:]
        if rest and (uri := _archive(rest[0], rest[1:2])) and uri not in out:
            out.append(uri)
    return out


def parse_deb822(text: str) -> list[str]:
    """Archive URIs of deb822 apt sources (stanzas of Types, URIs, Suites, Enabled)."""
    out = []
    for stanza in text.split("\n\n"):
        fields: dict[str, str] = {}
        key = None
        for line in stanza.splitlines():
            if line.startswith("#") or not line.strip():
                continue
            if line[0].isspace() and key:  # a continuation line
                fields[key] += " " + line.strip()
            elif ":" in line:
                key, value = line.split(":", 1)
                key = key.strip().lower()
                fields[key] = value.strip()
        if "deb" not in fields.get("types", "").split() or fields.get("enabled", "yes").lower() == "no":
            continue
        for uri in fields.get("uris", "").split():
            archive = _archive(uri, fields.get("suites", "").split())
            if archive and archive not in out:
                out.append(archive)
    return out


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
    found = mirrors()
    if not found:
        raise FetchError(
            f"could not download {pkg.name} {pkg.version}: this machine's apt sources name no Debian "
            f"mirror; set ${ENV_MIRROR} (e.g. a Debian mirror's /debian URL)"
        )
    for mirror in found:
        url = f"{mirror}/{pkg.pool_path}"
        try:
            _http_get(url, target, pkg)
            return
        except ChecksumError:
            raise
        except (urllib.error.URLError, OSError, TimeoutError, _BrokenDownload) as exc:
            errors.append(f"{url}: {exc}")
    raise FetchError(
        f"could not download {pkg.name} {pkg.version} from the apt sources' mirrors (or set ${ENV_MIRROR}): "
        + "; ".join(errors)
    )


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
