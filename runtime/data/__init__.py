"""Datasets from package registries, generic graph loaders, and the in-memory graph types."""

from graphtrain.runtime.data.graph import Graph, KnowledgeGraph

__all__ = ["Graph", "KnowledgeGraph"]
