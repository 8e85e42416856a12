"""A table's rows in memory, shared by the shard servers' tables and the collective ones: a piece of a
table with its optimizer state and row lock (shard.py), dynamic vocabularies (keyed.py), initial values
(inits.py), where a table lives and whether it fits (placement.py), the optimizer step under the lock
(update.py), GPU tables (gpu.py), the state's bytes (sizes.py) and its own error type (errors.py).
Below checkpoint/ and kvstore/: it knows neither the checkpoint format nor the wire protocol."""
