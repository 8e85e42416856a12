"""A shard server serving requests: the I/O thread and its workers (server.py), the one request path
behind both transports (dispatch.py), small pulls on the I/O thread (inline.py), the per-peer run queue
(fairqueue.py), bounded replies (outbox.py), pull buffers (chunkbuffers.py), barriers (barrier.py) and
metrics (metrics.py)."""
