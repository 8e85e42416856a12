"""Datasets from package registries, generic graph loaders, the in-memory graph types (graph.py) and
checksummed, atomic file writes (cache.py). Imports nothing itself: `graphtrain validate` reads a spec
through cache.py where numpy is not installed."""
