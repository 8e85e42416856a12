"""The Kubernetes operator for GraphTraining (kopf). Importable as `graphtrain.operator`, never as
the standard library's top-level `operator`."""
