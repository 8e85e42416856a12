"""What every trainer needs: seeds, DDP, progress reports, dense checkpoints and resume.

Progress: rank 0 writes <run_dir>/progress.json (atomically) after every step window and evaluation;
the local launcher turns it into the run's status, the operator into the GraphTraining's status.
Dense checkpoints hold the model and optimizer state as tensors, written with torch.save and read
with torch.load(weights_only=True): no arbitrary object is ever unpickled. Embedding tables are
checkpointed by the shard servers (kvstore.checkpoint); a checkpoint is complete when both are, and its
checkpoint.json records the sha256 of the trainers' files too, so resuming checks every file and skips a
damaged latest checkpoint for the newest one that checks out.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as torch_dist

from graphtrain.runtime.data.cache import hash_tree, write_json
from graphtrain.runtime.kvstore import checkpoint as ckpt


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


@dataclass
class Dist:
    """This trainer's place among the trainers."""

    rank: int = 0
    world: int = 1
    init_method: str | None = None  # tcp://host:port of rank 0 (gloo rendezvous)
    backend: str = "gloo"

    def __enter__(self) -> Dist:
        if self.world > 1:
            if not self.init_method:
                raise ValueError("several trainers need an init method (tcp://host:port of rank 0)")
            torch_dist.init_process_group(
                self.backend,
                init_method=self.init_method,
                rank=self.rank,
                world_size=self.world,
                timeout=dt.timedelta(seconds=600),
            )
        return self

    def __exit__(self, *exc: object) -> None:
        if self.world > 1 and torch_dist.is_initialized():
            torch_dist.destroy_process_group()

    def sum(self, values: list[float]) -> list[float]:
        """Element-wise sum over all trainers (evaluation counts)."""
        t = torch.tensor(values, dtype=torch.float64)
        if self.world > 1:
            torch_dist.all_reduce(t)
        return t.tolist()

    def share(self, batch_size: int) -> int:
        """This trainer's part of a global batch: N trainers with DDP take the steps one trainer would
        (same effective batch, same learning rate schedule), so results do not depend on N."""
        return max(1, batch_size // self.world)

    def barrier(self) -> None:
        if self.world > 1:
            torch_dist.barrier()

    def broadcast_text(self, text: str, limit: int = 256) -> str:
        """Rank 0's `text` (at most `limit` bytes of UTF-8) on every rank."""
        if self.world == 1:
            return text
        raw = text.encode()
        if len(raw) > limit:
            raise ValueError(f"{len(raw)} bytes to broadcast, at most {limit}")
        buf = torch.zeros(limit, dtype=torch.uint8)
        buf[: len(raw)] = torch.tensor(list(raw), dtype=torch.uint8)
        torch_dist.broadcast(buf, src=0)
        return bytes(buf.tolist()).rstrip(b"\0").decode()


@dataclass
class Progress:
    epoch: int = 0
    epochs: int = 0
    step: int = 0
    loss: float | None = None
    samples_per_second: float | None = None
    eval_metric: str | None = None
    eval_value: float | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    state: str = "Training"
    updated_at: str = ""

    def summary(self) -> str:
        parts = [f"epoch {self.epoch}/{self.epochs}"]
        if self.loss is not None:
            parts.append(f"loss {self.loss:.3f}")
        if self.eval_value is not None:
            parts.append(f"{self.eval_metric} {self.eval_value:.4f}")
        return ", ".join(parts)


class Reporter:
    """Rank 0 writes progress.json; every rank prints a line per report when asked to. In a pod
    (`configmap`), every rank also patches its heartbeat (`rank-<i>`) and rank 0 the progress into the
    training's progress ConfigMap, at most every HEARTBEAT_SECONDS: the operator reads both."""

    HEARTBEAT_SECONDS = 5.0

    def __init__(self, run_dir: Path | None, rank: int, echo: bool = True, configmap: str | None = None):
        self.path = None if run_dir is None or rank != 0 else run_dir / "progress.json"
        self.rank = rank
        self.echo = echo and rank == 0
        self.configmap = configmap
        self._last_patch = 0.0
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)

    def report(self, p: Progress) -> None:
        p.updated_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        doc = {**asdict(p), "summary": p.summary()}
        if self.path is not None:
            write_json(self.path, doc)
        if self.echo:
            rate = f", {p.samples_per_second:,.0f} samples/s" if p.samples_per_second else ""
            print(f"[trainer] step {p.step} {p.summary()}{rate}", flush=True)
        final = p.state != "Training"
        if self.configmap and (final or time.monotonic() - self._last_patch >= self.HEARTBEAT_SECONDS):
            self._last_patch = time.monotonic()
            self._patch(doc)

    def _patch(self, doc: dict[str, Any]) -> None:
        """Best effort: a failed patch costs one heartbeat, never the training."""
        import kubernetes

        data = {f"rank-{self.rank}": json.dumps({"updated_at": doc["updated_at"], "step": doc["step"]})}
        if self.rank == 0:
            data["progress"] = json.dumps({k: v for k, v in doc.items() if k not in ("metrics", "state")})
        try:
            if not getattr(Reporter, "_configured", False):
                if os.environ.get("KUBERNETES_SERVICE_HOST"):
                    kubernetes.config.load_incluster_config()
                else:  # a trainer outside the cluster, e.g. in tests: $KUBECONFIG
                    kubernetes.config.load_kube_config()
                Reporter._configured = True  # type: ignore[attr-defined]
            namespace = os.environ.get("POD_NAMESPACE", "default")
            kubernetes.client.CoreV1Api().patch_namespaced_config_map(
                self.configmap, namespace, {"data": data}
            )
        except Exception as exc:  # noqa: BLE001
            print(f"[trainer] progress ConfigMap {self.configmap}: {exc}", file=sys.stderr, flush=True)


class Throughput:
    """Samples per second over the last window."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.samples = 0

    def add(self, n: int) -> None:
        self.samples += n

    def rate(self, world: int = 1) -> float:
        elapsed = max(time.perf_counter() - self.start, 1e-9)
        return self.samples * world / elapsed


def save_dense(path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Model and optimizer state (tensors only), written atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, tmp)
    with open(tmp, "rb+") as f:
        os.fsync(f.fileno())
    tmp.replace(path)


def load_dense(path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Restore what save_dense wrote (weights_only: tensors and plain values, nothing else)."""
    state = torch.load(path, map_location="cpu", weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    return model.module if hasattr(model, "module") else model


KEEP_CHECKPOINTS = 2  # the latest and the one before it (in case the latest's files are damaged)


def init_spec(table: Any, seed: int = 0) -> dict[str, Any]:
    """The shard servers' init description of a spec's embedding table."""
    i = table.init
    return {"kind": str(i.kind), "low": i.low, "high": i.high, "mean": i.mean, "std": i.std, "seed": seed}


class StepHooks:
    """What every trainer does: set up its place (setup()), and after a step and after an epoch count,
    report progress (rank 0 writes it) and checkpoint on schedule."""

    def setup(
        self,
        spec: Any,
        graph: Any,
        dist: Dist,
        run_dir: Path | None,
        checkpoint_root: Path | None,
        progress_configmap: str | None,
    ) -> None:
        self.spec, self.graph, self.dist = spec, graph, dist
        self.checkpoint_root = checkpoint_root
        self.reporter = Reporter(run_dir, dist.rank, configmap=progress_configmap)
        self.epoch = self.step = 0
        seed_everything(spec.training.seed)

    step: int
    epoch: int
    dist: Dist
    reporter: Reporter
    spec: Any

    checkpoint_root: Path | None
    graph: Any  # DistGraph: its client reaches every shard server

    # ----------------------------------------------------------------------------- checkpoints

    def save_state(self, directory: Path, meta: dict[str, Any]) -> None:
        """The trainer's own part of a checkpoint (rank 0); dense models add their state."""
        directory.mkdir(parents=True, exist_ok=True)
        write_json(directory / "trainer.json", meta)

    def load_state(self, directory: Path) -> dict[str, Any]:
        """Restore save_state's part on every rank; returns its metadata (epoch, step)."""
        return json.loads((directory / "trainer.json").read_text())

    def resumed(self) -> None:
        """Called once epoch and step are restored (loaders and tables follow them)."""

    def checkpoint(self) -> None:
        """All trainers pause (no pushes in flight) while rank 0 saves its state and the shard servers
        theirs; LATEST moves only once every piece is written."""
        if self.checkpoint_root is None:
            return
        self.graph.client.settle()  # this trainer's pushes in flight are applied before the barrier
        self.dist.barrier()
        if self.dist.rank == 0:
            tag = f"step-{self.step:09d}"
            meta = {"epoch": self.epoch, "step": self.step}
            directory = self.checkpoint_root / tag
            if directory.exists():  # a damaged one this run resumed from before: nothing of it may stay
                shutil.rmtree(directory)
            self.save_state(directory, meta)
            extra = {"trainer": meta, "files": hash_tree(directory)}  # the trainers' files, checked on resume
            self.graph.client.checkpoint(tag, extra=extra, root=self.checkpoint_root)
            ckpt.mark_latest(self.checkpoint_root, tag)
            ckpt.prune(self.checkpoint_root, KEEP_CHECKPOINTS)
        self.dist.barrier()

    def resume(self) -> bool:
        """Continue from the latest complete checkpoint that checks out, if there is one: rank 0 picks
        it (saying which damaged ones it skipped) and has every shard restore it (servers that survived a
        failure are ahead of it), every rank its own state."""
        if self.checkpoint_root is None:
            return False
        name = ""
        if self.dist.rank == 0:  # one rank reads every file, and all take its choice
            latest, skipped = ckpt.latest_verified(self.checkpoint_root)
            for line in skipped:
                print(f"[trainer] {line}", file=sys.stderr, flush=True)
            name = latest.name if latest is not None else ""
        name = self.dist.broadcast_text(name)
        if not name:
            return False
        meta = self.load_state(self.checkpoint_root / name)
        if self.dist.rank == 0:
            self.graph.client.restore(name)
        self.dist.barrier()
        self.epoch, self.step = int(meta["epoch"]), int(meta["step"])
        self.resumed()
        return True

    # ------------------------------------------------------------------------------- progress

    def note(self, progress: Progress, window: Throughput, loss: torch.Tensor) -> None:
        progress.__dict__.update(
            epoch=self.epoch,
            step=self.step,
            loss=float(loss.detach()),
            samples_per_second=window.rate(self.dist.world),
        )

    def after_step(
        self, progress: Progress, window: Throughput, loss: torch.Tensor, samples: int, every: int
    ) -> None:
        self.step += 1
        window.add(samples)
        if self.step % every == 0:
            self.note(progress, window, loss)
            self.reporter.report(progress)
        interval = self.spec.training.checkpoint_interval
        if interval and self.step % interval == 0:
            self.checkpoint()
