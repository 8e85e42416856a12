"""The shard servers' clients: KVClient (kvclient.py) over a transport (transport.py): ZMQ to server
processes (zmq_transport.py, its calls on the wire in zmq_exchange.py, with what it maps of same-host
servers: samehost.py), or shards in this process (inproc.py, with GPU tables used where they lie:
direct.py)."""
