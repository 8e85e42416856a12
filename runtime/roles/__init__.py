"""The runtime's role entry points, one module each: partition.py (the partition Job), shard_server.py
(one shard server), train.py (one trainer).

Each entry point takes its role's description from graphtrain.contract.roles (PartitionParams,
ShardServerParams, TrainParams), the one the executors' command lines are built from; options.py makes a
role's CLI options from the same description, so runtime/cli.py only mounts and dispatches. Both
executors reach these functions through that CLI: the local launcher as processes, the operator as
container commands.
"""
