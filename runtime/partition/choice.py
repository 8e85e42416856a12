"""`partition.algorithm: auto`: METIS when its memory estimate fits the partition step's budget; when it
does not, whichever of METIS and Fennel (streaming, memory O(nodes x parts): memory.streaming_need) is
estimated to need less. Fennel saves memory on large graphs in few parts, but at many parts, or on a graph
smaller than one chunk of edges, it needs more than METIS: streaming then would only run out of memory
sooner. The decision and the budget are pure functions of numbers; runtime/memlimits.py reads the two
limits the process itself is under.

The budget, first found first (partition.algorithm's description, contract/spec/placement.py, says so):
1. partition.memoryLimit (the spec, or `graphtrain partition --memory-limit`);
2. partition.resources.limits.memory: the partition Job's container limit as the spec states it;
3. the cgroup memory limit of this process (memory.max): in a pod, the container's limit, including one
   the operator's defaults set rather than the spec;
4. the address-space limit (`ulimit -v`, RLIMIT_AS);
5. the memory available now.
Limits on the whole process (2-4) count what it holds already (interpreter, libraries, node data).
"""

from __future__ import annotations

from dataclasses import dataclass

from graphtrain.runtime.partition import memory


@dataclass(frozen=True)
class Budget:
    """How many bytes the partition step may use, and which setting said so."""

    bytes: int
    source: str
    held: int = 0  # what the process held already, taken off the limit

    def words(self) -> str:
        """'N from SOURCE', and what the process held when it counted."""
        if not self.held:
            return f"{memory.human(self.bytes)} from {self.source}"
        return (
            f"{memory.human(self.bytes)} ({memory.human(self.bytes + self.held)} from {self.source}, less "
            f"{memory.human(self.held)} this process holds)"
        )


def budget(
    memory_limit: int | None,
    resources_limit: int | None,
    cgroup_limit: int | None,
    address_space_limit: int | None,
    available: int,
    rss: int = 0,
    vms: int = 0,
) -> Budget:
    """The first limit that is set, in the order of the module docstring. A limit on the whole process
    (the container's, the cgroup's) is reduced by what the process holds already (`rss`), the address-
    space limit by its mapped size (`vms`): the interpreter and the node data count against them too.
    partition.memoryLimit is the estimate's own limit, as the METIS path refuses by it."""
    for value, held, source in (
        (memory_limit, 0, "partition.memoryLimit"),
        (resources_limit, rss, "partition.resources.limits.memory"),
        (cgroup_limit, rss, "the cgroup memory limit"),
        (address_space_limit, vms, "the address-space limit (ulimit -v)"),
    ):
        if value is not None:
            left = max(0, int(value) - held)
            return Budget(left, source, int(value) - left)
    return Budget(int(available), "the memory available")


def choose(algorithm: str, metis_need: int, limit: Budget, stream_need: int) -> str:
    """The algorithm to run: `auto` becomes metis when its estimate fits the budget, else the one whose
    estimate is smaller (fennel on a tie); any other algorithm stays as it is."""
    if algorithm != "auto":
        return algorithm
    if metis_need <= limit.bytes:
        return "metis"
    return "fennel" if stream_need <= metis_need else "metis"


def reason(metis_need: int, limit: Budget, stream_need: int, parts: int) -> str:
    """One line saying what `auto` chose and why (for the log and the partition's notes)."""
    chosen = choose("auto", metis_need, limit, stream_need)
    metis, fennel = memory.human(metis_need), memory.human(stream_need)
    if chosen == "metis" and metis_need <= limit.bytes:
        why = f"METIS needs about {metis}, which fits {limit.words()}"
    elif chosen == "fennel":
        why = f"METIS needs about {metis}, which exceeds {limit.words()}; fennel about {fennel}"
        why += f" in {parts} parts"
    else:
        why = (
            f"METIS needs about {metis} and fennel about {fennel} in {parts} parts, both above "
            f"{limit.words()}: METIS needs less"
        )
    return f"partition.algorithm auto: {chosen} ({why})"
