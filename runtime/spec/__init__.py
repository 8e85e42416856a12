"""The contract both executors share: the GraphTraining model (model.py), its cross-field rules
(rules.py) and, beside them, what each executor must agree on. `graphtrain.runtime.spec` is a leaf: it
imports nothing else of graphtrain, so the operator and the API can depend on it without the runtime's
heavy dependencies."""

from graphtrain.runtime.spec.model import *  # noqa: F403 - the model's public names are the package's
from graphtrain.runtime.spec.rules import RULES, Rule, rules_of  # noqa: F401 - for the CRD and tests
