"""The one choice of a spec's TrainingTask (task.py), which the train role and `graphtrain predict`
share: by `spec.task`, node classification, link prediction, the edge tasks or knowledge-graph
embedding."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def make_task(
    gt: Any, graph: Any, dist: Any, device: torch.device, connect: Callable[[], Any] | None = None
) -> Any:
    """The TrainingTask of `gt`'s task over `graph` (the train role's and `graphtrain predict`'s one
    choice of it). `connect`: opens node classification's loader thread its own connection (default:
    the graph's, as in-process shards allow); no other task opens one."""
    from graphtrain.contract.spec import EDGE_TASKS, LINK_PREDICTION, NODE_CLASSIFICATION

    kind = gt.spec.task_kind
    if kind == NODE_CLASSIFICATION:
        from graphtrain.runtime.train.node_classification import NodeClassification

        return NodeClassification(gt, graph, connect() if connect else graph.client, dist, device)
    if kind == LINK_PREDICTION:
        from graphtrain.runtime.train.link_prediction import GNNLinkPrediction

        return GNNLinkPrediction(gt, graph, dist, device)
    if kind in EDGE_TASKS:
        from graphtrain.runtime.train.edge_classification import GNNEdgeClassification

        return GNNEdgeClassification(gt, graph, dist, device)
    from graphtrain.runtime.train.kge import LinkPrediction

    return LinkPrediction(gt, graph, dist, device)
