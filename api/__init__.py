"""The REST status and metrics service (FastAPI), `graphtrain.api`."""
