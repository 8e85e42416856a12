"""The Python heap of a long-running role: what its setup built, kept out of later collections.

CPython's full (generation 2) collection walks every tracked object. A trainer holds ~340,000 of them
once torch, pydantic and the rest are imported, nearly all for the life of the process. Walking them
took 160-180 ms on this project's 2-core machine, landing inside one training step about every 190
WordNet steps: 13 ms steps with one of 176 ms, 10 % of bench/e2e.py's timed window. `settle()`
collects once, then moves the survivors to the permanent generation (gc.freeze, as Instagram's and
Python's docs advise for long-lived servers); later collections walk only what the loop made.
"""

from __future__ import annotations

import gc


def settle() -> int:
    """Collect what setup left behind, then freeze what survives: call it once setup is done, before a
    steady loop (training, serving). Returns how many objects are now frozen; garbage made later is
    still collected as before."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
