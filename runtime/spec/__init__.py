"""The contract both executors share: the GraphTraining model (model.py) and, beside it, what each
executor must agree on. `graphtrain.runtime.spec` is a leaf: it imports nothing else of graphtrain, so the
operator and the API can depend on it without the runtime's heavy dependencies."""

from graphtrain.runtime.spec.model import *  # noqa: F403 - the model's public names are the package's
