"""The shard servers' wire: the protocol's messages (protocol.py), each op's arguments checked
(opargs.py), and authentication at the connection (auth.py)."""
