"""WordNet 3.0 (Debian `wordnet-base`) as a node-classification graph.

Nodes are the 117,659 synsets; edges are all pointers (lexical pointers collapsed to their synsets),
364,552 unique (head, pointer, tail) triples with the pointer symbol as edge type; the label is the
lexicographer file (45 supersense classes); features are the binary bag-of-words of the gloss with the
words that occur in at least `min_df` glosses (18,130 dims for min_df=5), kept sparse.
Licence: the WordNet 3.0 licence (Princeton, BSD-like); its copyright notice travels with the data.

The data files are documented in wndb(5WN): one synset per line,
`offset lex_filenum ss_type w_cnt (word lex_id)* p_cnt (symbol offset pos source/target)* [frames] | gloss`
with w_cnt in hexadecimal.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from graphtrain.runtime.errors import DataError

POS_FILES = {"n": "data.noun", "v": "data.verb", "a": "data.adj", "r": "data.adv"}
# External node id: POS code * 1e8 + the synset's byte offset in its data file (offsets have 8 digits).
POS_CODE = {"n": 1, "v": 2, "a": 3, "r": 4}
NUM_CLASSES = 45
_WORD = re.compile(r"[a-z]+")


def parse(root: Path, min_df: int = 5) -> dict[str, np.ndarray | sp.csr_matrix | list[str]]:
    """Parse the four data files under `root` into arrays.

    Returns a dict with src, dst, etype (int64 edges, one per unique triple), relations (pointer
    symbols, etype's names), label (int64), node_ids (external ids), feat (CSR float32) and vocab.

    Raises:
        DataError: a file is missing or a line does not follow the wndb format.
    """
    index: dict[tuple[str, str], int] = {}
    labels: list[int] = []
    glosses: list[str] = []
    pointers: list[tuple[int, str, str, str]] = []  # (head node, symbol, target pos, target offset)
    for pos, fname in POS_FILES.items():
        path = root / fname
        if not path.is_file():
            raise DataError(f"{path}: missing WordNet data file")
        with open(path, encoding="latin-1") as f:
            for lineno, line in enumerate(f, 1):
                if line.startswith("  "):  # licence header
                    continue
                try:
                    head, _, gloss = line.partition(" | ")
                    fields = head.split()
                    node = index.setdefault((pos, fields[0]), len(index))
                    labels.append(int(fields[1]))
                    glosses.append(gloss)
                    k = 4 + 2 * int(fields[3], 16)
                    n_ptr = int(fields[k])
                    k += 1
                    for _ in range(n_ptr):
                        sym, off, tpos = fields[k], fields[k + 1], fields[k + 2]
                        pointers.append((node, sym, "a" if tpos == "s" else tpos, off))
                        k += 4
                except (IndexError, ValueError) as exc:
                    raise DataError(f"{path}:{lineno}: not a wndb synset line ({exc})") from None
    n = len(index)
    label = np.asarray(labels, dtype=np.int64)
    if label.min() < 0 or label.max() >= NUM_CLASSES:
        raise DataError(f"{root}: lexicographer file ids outside [0, {NUM_CLASSES})")
    relations = sorted({p[1] for p in pointers})
    rel_id = {r: i for i, r in enumerate(relations)}
    try:
        trip = np.array([(h, rel_id[s], index[(tp, off)]) for h, s, tp, off in pointers], dtype=np.int64)
    except KeyError as exc:
        raise DataError(f"{root}: a pointer targets unknown synset {exc}") from None
    trip = np.unique(trip, axis=0)
    node_ids = np.empty(n, dtype=np.int64)
    for (pos, off), i in index.items():
        node_ids[i] = POS_CODE[pos] * 100_000_000 + int(off)
    feat, vocab = bag_of_words(glosses, min_df)
    return {
        "src": trip[:, 0].copy(),
        "dst": trip[:, 2].copy(),
        "etype": trip[:, 1].copy(),
        "relations": relations,
        "label": label,
        "node_ids": node_ids,
        "feat": feat,
        "vocab": vocab,
    }


def bag_of_words(texts: list[str], min_df: int) -> tuple[sp.csr_matrix, list[str]]:
    """Binary bag-of-words over the words that appear in at least `min_df` texts."""
    tokens = [set(_WORD.findall(t.lower())) for t in texts]
    df: dict[str, int] = {}
    for toks in tokens:
        for w in toks:
            df[w] = df.get(w, 0) + 1
    vocab = sorted(w for w, c in df.items() if c >= min_df)
    col = {w: j for j, w in enumerate(vocab)}
    indptr = [0]
    indices: list[int] = []
    for toks in tokens:
        indices.extend(sorted(col[w] for w in toks if w in col))
        indptr.append(len(indices))
    feat = sp.csr_matrix(
        (
            np.ones(len(indices), dtype=np.float32),
            np.asarray(indices, dtype=np.int64),
            np.asarray(indptr, dtype=np.int64),
        ),
        shape=(len(texts), len(vocab)),
    )
    return feat, vocab
