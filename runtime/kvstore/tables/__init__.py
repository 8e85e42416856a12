"""What one shard server holds and does, independent of the transport: its tables (state.py), its
partition of the graph for sampling (graphpart.py), and the shared memory a client on its host maps
(shm.py)."""
