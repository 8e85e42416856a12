"""Where the API reads trainings from: a StatusSource (base.py), over Kubernetes (kubernetes.py) or a
local runs directory (local.py). The routers see only the protocol."""
