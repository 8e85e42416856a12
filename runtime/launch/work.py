"""What the partition step partitions (its own module: partition_step and its streaming branch both
read it, and neither may import the other both ways)."""

from __future__ import annotations

from dataclasses import dataclass

from graphtrain.contract.spec import GraphSource, GraphTraining, PartitionSpec


@dataclass(frozen=True)
class PartitionWork:
    """What to partition: the graph (its paths resolved), the partition settings, the feature projection,
    and the spec whose model the data must serve (None: a graph named by options, not the spec's)."""

    source: GraphSource
    settings: PartitionSpec
    projection: int | None = None
    model: GraphTraining | None = None
