# graphtrain's images, one Dockerfile, three targets (README "Container images"):
#   runtime       partition Jobs, CPU shard servers, gloo trainers: CPU torch and the native core
#   runtime-cuda  the same with CUDA torch and the CUDA core (nvcc, sm_80 and sm_90)
#   control       the operator and the REST status API: no torch, no compiler
#
#   podman build --target runtime -t ghcr.io/graphtrain/graphtrain:0.1.0 .
#   podman build --target control -t ghcr.io/graphtrain/graphtrain-control:0.1.0 .
#   podman build --target runtime-cuda -t ghcr.io/graphtrain/graphtrain:0.1.0-cuda .
#   (docker build takes the same arguments; BuildKit, the default since Docker 23, for RUN --mount)
#
# Builder stages make wheels; the final stages only install wheels (pip --no-index, from bind mounts of
# the builders' wheel directories, so no wheel file and no compiler stays in an image). Versions are
# requirements-dev.txt's, the project's one pin list, used whole as pip constraints (-c): constraints
# fix the version of every package they name and install nothing themselves, so the dev tools in it stay
# out. Dependencies are downloaded before the source is copied: a source change rebuilds the last layers.
#
# Every image runs as uid/gid 10001 with HOME=/tmp and writes only to /tmp and mounted volumes, so it
# works with a read-only root filesystem (mount an emptyDir on /tmp in Kubernetes). No ENTRYPOINT: the
# operator runs `command: [graphtrain, ...]`.

# The Python base of every stage. CI passes a local Debian 12 base (tests/images/base-image.sh).
ARG BASE=python:3.11-slim-bookworm
# Only for runtime-cuda: an image holding the CUDA toolkit (nvcc) under /usr/local/cuda.
ARG CUDA_BASE=nvidia/cuda:13.0.1-devel-ubuntu24.04

FROM ${CUDA_BASE} AS cuda-toolkit

# ------------------------------------------------------------------------------------------------ common
FROM ${BASE} AS python
# PYTHONDONTWRITEBYTECODE: pip compiles the bytecode at install time; nothing is written at run time.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore

# The requirement lists of each role, derived from pyproject.toml (its ranges), and the pins.
FROM python AS requirements
WORKDIR /requirements
COPY pyproject.toml requirements-dev.txt ./
RUN python -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; \
[open(f"{r}.txt", "w").write("\n".join(p["dependencies"] + p["optional-dependencies"][r]) + "\n") \
 for r in ("runtime", "operator", "api")]' \
 && grep -v '^torch\b' runtime.txt > runtime-without-torch.txt \
 && cat operator.txt api.txt > control.txt \
 && mv requirements-dev.txt constraints.txt

# Wheels of the runtime's dependencies. torch comes alone from TORCH_INDEX_URL, by default the index of
# the CPU builds: PyPI's Linux torch is the multi-GB CUDA build and is not consulted for it. CI passes
# PIP_FIND_LINKS=/wheels with the CPU wheel on disk mounted there (`podman build -v /opt/wheels:/wheels:ro`)
# and PyPI as TORCH_INDEX_URL for torch's own dependencies: 2.13.0+cpu sorts above PyPI's 2.13.0, and the
# image test checks that the image holds the +cpu build.
FROM requirements AS runtime-deps
ARG PIP_FIND_LINKS
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
RUN pip download --only-binary=:all: --dest /wheelhouse --index-url "${TORCH_INDEX_URL}" \
      -c constraints.txt torch \
 && pip download --only-binary=:all: --dest /wheelhouse -c constraints.txt -r runtime-without-torch.txt \
 && cp constraints.txt runtime.txt /wheelhouse/ \
 && sha256sum /wheelhouse/* > /wheelhouse.sha256

FROM requirements AS runtime-cuda-deps
ARG PIP_FIND_LINKS
ARG TORCH_CUDA_INDEX_URL=https://download.pytorch.org/whl/cu130
RUN pip download --only-binary=:all: --dest /wheelhouse --index-url "${TORCH_CUDA_INDEX_URL}" \
      -c constraints.txt torch \
 && pip download --only-binary=:all: --dest /wheelhouse -c constraints.txt -r runtime-without-torch.txt \
 && cp constraints.txt runtime.txt /wheelhouse/ \
 && sha256sum /wheelhouse/* > /wheelhouse.sha256

FROM requirements AS control-deps
ARG PIP_FIND_LINKS
RUN pip download --only-binary=:all: --dest /wheelhouse -c constraints.txt -r control.txt \
 && cp constraints.txt control.txt /wheelhouse/ \
 && sha256sum /wheelhouse/* > /wheelhouse.sha256

# The sources the wheel is built from (not tests, bench or charts: see also .dockerignore).
FROM python AS source
WORKDIR /src
COPY pyproject.toml setup.py MANIFEST.in README.md requirements-dev.txt ./
COPY cli cli
COPY contract contract
COPY runtime runtime
COPY operator operator
COPY api api
COPY cuda cuda

# A C++ compiler for the native core (builder stages only). Debian packages come in the base's release
# at its current security level: the mirrors keep no old versions to pin to (hence DL3008 off).
FROM python AS compiler
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends g++ \
 && apt-get clean && rm -rf /var/lib/apt/lists/*

# graphtrain with the CPU core (C++/OpenMP, portable: no -march=native).
FROM compiler AS dist-runtime
COPY --from=source /src /src
WORKDIR /src
RUN pip wheel --no-deps --wheel-dir /dist . && sha256sum /dist/*.whl > /dist.sha256

# graphtrain with the CPU and the CUDA core, the toolkit copied from CUDA_BASE.
FROM compiler AS dist-cuda
ARG GRAPHTRAIN_CUDA_ARCHS="80 90"
COPY --from=cuda-toolkit /usr/local/cuda/ /usr/local/cuda/
ENV PATH=/usr/local/cuda/bin:${PATH}
COPY --from=source /src /src
WORKDIR /src
RUN GRAPHTRAIN_BUILD_CUDA=1 pip wheel --no-deps --wheel-dir /dist . \
 && sha256sum /dist/*.whl > /dist.sha256

# graphtrain without native code, for the control plane.
FROM source AS dist-control
RUN GRAPHTRAIN_NATIVE=0 pip wheel --no-deps --wheel-dir /dist . \
 && sha256sum /dist/*.whl > /dist.sha256

# ------------------------------------------------------------------------------------------ final images
# The user every image runs as (numeric, so Kubernetes' runAsNonRoot can check it), HOME=/tmp, and every
# cache a library might write pointed at /tmp. The steps that name a build (version, revision) come last
# in each target, so that a new revision rebuilds only them. podman 4.3 (buildah 1.28) keys a LABEL step's
# cache on its unexpanded text, and a wholly cached target keeps the LABEL and --label of the build that
# made it (an old revision, seen in CI): the revision is also written to a file by a RUN step, whose
# cache key holds the argument's value, so a new revision misses the cache from there on.
FROM python AS final
LABEL org.opencontainers.image.source="https://github.com/graphtrain/graphtrain" \
      org.opencontainers.image.licenses="Apache-2.0"
# No setuid or setgid file either (su, mount, passwd... of the base): nothing in the image may gain
# privileges, whether or not a pod says allowPrivilegeEscalation false.
RUN groupadd --gid 10001 graphtrain \
 && useradd --uid 10001 --gid 10001 --home-dir /tmp --no-create-home --shell /usr/sbin/nologin graphtrain \
 && find / -xdev -type f -perm /6000 -exec chmod ug-s {} +
ENV HOME=/tmp \
    XDG_CACHE_HOME=/tmp/.cache \
    TORCH_HOME=/tmp/.cache/torch \
    TORCHINDUCTOR_CACHE_DIR=/tmp/.cache/torchinductor \
    TRITON_CACHE_DIR=/tmp/.cache/triton
WORKDIR /tmp

# The native core's OpenMP runtime (libgomp), which the slim bases lack.
FROM final AS runtime-base
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends libgomp1 \
 && apt-get clean && rm -rf /var/lib/apt/lists/*

FROM runtime-base AS runtime
# The checksums of a builder's wheels are copied before they are installed from a bind mount: podman's
# layer cache does not look into bind-mounted stages, the copy makes it rebuild when they change (and
# records in the image what it was installed from).
COPY --from=runtime-deps /wheelhouse.sha256 /usr/local/share/graphtrain/dependencies.sha256
RUN --mount=type=bind,from=runtime-deps,source=/wheelhouse,target=/wheelhouse \
    pip install --no-index --find-links /wheelhouse -c /wheelhouse/constraints.txt -r /wheelhouse/runtime.txt
COPY --from=dist-runtime /dist.sha256 /usr/local/share/graphtrain/graphtrain.sha256
RUN --mount=type=bind,from=dist-runtime,source=/dist,target=/dist \
    pip install --no-index --no-deps /dist/*.whl
ARG VERSION=0.1.0
ARG REVISION=unknown
RUN printf '%s\n' "${REVISION}" > /usr/local/share/graphtrain/revision
LABEL org.opencontainers.image.title="graphtrain" \
      org.opencontainers.image.description="graphtrain runtime (CPU): partition, shard servers, trainers" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
USER 10001:10001
CMD ["graphtrain", "--help"]

FROM runtime-base AS runtime-cuda
COPY --from=runtime-cuda-deps /wheelhouse.sha256 /usr/local/share/graphtrain/dependencies.sha256
RUN --mount=type=bind,from=runtime-cuda-deps,source=/wheelhouse,target=/wheelhouse \
    pip install --no-index --find-links /wheelhouse -c /wheelhouse/constraints.txt -r /wheelhouse/runtime.txt
COPY --from=dist-cuda /dist.sha256 /usr/local/share/graphtrain/graphtrain.sha256
RUN --mount=type=bind,from=dist-cuda,source=/dist,target=/dist \
    pip install --no-index --no-deps /dist/*.whl
# torch's wheels carry the CUDA libraries and the core links the CUDA runtime statically: the driver is
# all the host adds (the NVIDIA container toolkit). Which GPUs is the device plugin's to say (or
# `--gpus`): no NVIDIA_VISIBLE_DEVICES=all here, which would hand every GPU of a node whose default
# runtime is NVIDIA's to a pod that asked for none.
ENV NVIDIA_DRIVER_CAPABILITIES=compute,utility
ARG VERSION=0.1.0
ARG REVISION=unknown
RUN printf '%s\n' "${REVISION}" > /usr/local/share/graphtrain/revision
LABEL org.opencontainers.image.title="graphtrain" \
      org.opencontainers.image.description="graphtrain runtime (CUDA): shard servers and trainers on GPUs" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
USER 10001:10001
CMD ["graphtrain", "--help"]

FROM final AS control
COPY --from=control-deps /wheelhouse.sha256 /usr/local/share/graphtrain/dependencies.sha256
RUN --mount=type=bind,from=control-deps,source=/wheelhouse,target=/wheelhouse \
    pip install --no-index --find-links /wheelhouse -c /wheelhouse/constraints.txt -r /wheelhouse/control.txt
COPY --from=dist-control /dist.sha256 /usr/local/share/graphtrain/graphtrain.sha256
RUN --mount=type=bind,from=dist-control,source=/dist,target=/dist \
    pip install --no-index --no-deps /dist/*.whl
ARG VERSION=0.1.0
ARG REVISION=unknown
RUN printf '%s\n' "${REVISION}" > /usr/local/share/graphtrain/revision
LABEL org.opencontainers.image.title="graphtrain-control" \
      org.opencontainers.image.description="graphtrain control plane: the GraphTraining operator and the REST status API" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
USER 10001:10001
CMD ["graphtrain", "--help"]
