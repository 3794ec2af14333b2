# The README's two commands: `make reproduce` and `make test`. Both build .venv first when needed.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Reinstall only when the pinned requirements or the package metadata change.
REQ_HASH := $(shell cat requirements.txt pyproject.toml | sha256sum | cut -c1-16)
STAMP := $(VENV)/.installed-$(REQ_HASH)

export FLWR_TELEMETRY_ENABLED := 0
export MLFLOW_SERVER_ENABLE_JOB_EXECUTION := false
export PYTHONHASHSEED := 0
# Real data root: the environment wins; else a local mirror beside the checkout (as CI lays it out); else the
# loaders fall back to data/raw and name any missing file.
ifeq ($(strip $(EEGPRIVACY_DATA)),)
  ifneq ($(wildcard ../shared/data/MANIFEST.tsv),)
    export EEGPRIVACY_DATA := $(abspath ../shared/data)
  endif
endif

.PHONY: help venv test reproduce reproduce-scratch ui postgres postgres-stop datasets bench benchmarks clean-venv

help:  ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

venv: $(STAMP)  ## create .venv and install the pinned stack (once per requirements hash)

$(STAMP): requirements.txt pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@rm -f $(VENV)/.installed-*
	$(BIN)/python -m pip install --quiet --upgrade "pip==26.3" "setuptools==84.2.1"
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	@# torchaudio's compiled extension is built against CUDA torch and cannot load beside the CPU build;
	@# without it torchaudio runs in its pure-Python mode, which is all braindecode needs.
	@rm -f $(VENV)/lib/python3.11/site-packages/torchaudio/lib/*.so
	$(BIN)/python -c "import torch, braindecode, diffprivlib, flwr; assert torch.__version__.startswith('2.13.0'), torch.__version__"
	@touch $@

test: $(STAMP)  ## run the test suite
	$(BIN)/python -m pytest

# The server-side deployment scenario needs a secret linkage key and has no default: use the one the environment
# names, else a random key generated once on this machine in data/secrets/ (git-ignored, owner-only).
LINKAGE_KEY_FILE := data/secrets/linkage.key
# `make reproduce` times itself (the venv build excluded) into REPRODUCE_WALL; every `eegprivacy` stage appends its
# wall time and peak RSS to STAGE_LOG (emptied first), and `make bench` reports both.
REPRODUCE_WALL := benchmarks/reproduce_wall.json
STAGE_LOG := data/cache/reproduce_stages.jsonl
# Written before `dvc repro` (stages to run, their recorded seconds): each stage prints "stage k of n, elapsed, ETA".
REPRODUCE_PLAN := data/cache/reproduce_plan.json
# Resumable per-cell caches: with them, a rerun recomputes only new cells (`reproduce-scratch` moves them aside).
CELL_CACHES := data/sweeps data/embedding_audit $(wildcard data/optuna/*.db)

# PROFILE=default (the README's `make reproduce`: the headline cohorts of params/profile.yaml — study A on MSU + the
# synthetic sanity check, study B on eegmmidb, study C's three cohorts) or full (paper scale: eegmat's study A and B
# arms and study B's synthetic cohort added, 20 noise seeds and an inner LOSO in study A (and in its end-to-end
# table 40 seeds at every ε, the paper's row at every ε and the k sweep; all five designs in the sample-size sweep),
# 5 seeds and every round
# attacked on every study B cohort, the published encoders in study C, 80 / 120 Optuna trials; several hours).
# `full` runs as a DVC experiment that writes these values into params/ (`git checkout params/` returns to default).
PROFILE ?= default
FULL_PROFILE := \
	-S 'params/profile.yaml:profile.name=full' \
	-S 'params/profile.yaml:profile.study_a=[synthetic_clinical,eegmat,msu_schizophrenia]' \
	-S 'params/profile.yaml:profile.study_a_attacks=[eegmat,msu_schizophrenia]' \
	-S 'params/profile.yaml:++profile.study_b={eegmmidb: data/versions/eegmmidb.json, eegmat: data/versions/eegmat.json, synthetic_mi: src/eegprivacy/data/synthetic.py}' \
	-S 'params/dp_release.yaml:dp_release.noise_seeds=20' \
	-S 'params/dp_release.yaml:dp_utility.baseline_mlp_seeds=20' \
	-S 'params/dp_release.yaml:dp_utility.nested_inner_folds=loso' \
	-S 'params/dp_release.yaml:dp_utility.nested_seeds=3' \
	-S 'params/dp_release.yaml:dp_utility.mechanisms=[gaussian_analytic,gaussian_classic,laplace_implemented,laplace_formal]' \
	-S 'params/table_attacks.yaml:table_attacks.noise_seeds=20' \
	-S 'params/dp_scaling.yaml:dp_scaling.noise_seeds=20' \
	-S 'params/dp_end_to_end.yaml:dp_end_to_end.noise_seeds_high=40' \
	-S 'params/dp_end_to_end.yaml:dp_end_to_end.design_epsilons={}' \
	-S 'params/dp_end_to_end.yaml:dp_end_to_end.component_sweep.enabled=true' \
	-S 'params/dp_sample_size.yaml:dp_sample_size.designs=[paper_public_scaling,public_pca,public_pls,dp_pca,marginal_synthesis]' \
	-S 'params/dp_sample_size.yaml:dp_sample_size.seeds=20' \
	-S 'params/deployment.yaml:deployment.noise_seeds=10' \
	-S 'params/federated_mia.yaml:federated_mia.models=[simplenet,eegnet]' \
	-S 'params/federated_mia.yaml:federated_mia.per_dataset={}' \
	-S 'params/federated_transfer.yaml:federated_transfer.models=[simplenet,eegnet]' \
	-S 'params/federated_control.yaml:federated_control.per_model={}' \
	-S 'params/embedding_audit.yaml:embedding_audit.profile=full' \
	-S 'params/optuna.yaml:optuna_study_a.n_trials=80' \
	-S 'params/optuna.yaml:optuna_study_b.n_trials=120'
ifeq ($(PROFILE),full)
  DVC_RUN = $(BIN)/dvc exp run $(FULL_PROFILE) $(REPRO_ARGS)
else ifeq ($(PROFILE),default)
  DVC_RUN = $(BIN)/dvc repro $(REPRO_ARGS)
else
  $(error PROFILE must be default or full, not "$(PROFILE)")
endif

# The reports are written last, from the store the run just wrote: every run they cite is in it (issue 47).
reproduce: $(STAMP)  ## the DVC pipeline (real public data), then the reports; PROFILE=full: paper scale
	@if [ -z "$$EEGPRIVACY_LINKAGE_KEY$$EEGPRIVACY_LINKAGE_KEY_FILE" ] && [ ! -s $(LINKAGE_KEY_FILE) ]; then \
		mkdir -p $(dir $(LINKAGE_KEY_FILE)) && chmod 700 $(dir $(LINKAGE_KEY_FILE)) && \
		(umask 077; $(BIN)/python -c "import secrets; print(secrets.token_hex(32))" > $(LINKAGE_KEY_FILE)) && \
		echo "created a random linkage key in $(LINKAGE_KEY_FILE) (keep it secret; it never leaves this machine)"; \
	fi
	@mkdir -p $(dir $(STAGE_LOG)) && : > $(STAGE_LOG)
	cached=$$(find $(CELL_CACHES) -type f ! -name .gitignore 2>/dev/null | wc -l); start=$$(date +%s.%N); \
	export PATH=$(abspath $(BIN)):$$PATH \
		EEGPRIVACY_LINKAGE_KEY_FILE=$${EEGPRIVACY_LINKAGE_KEY_FILE:-$$( [ -n "$$EEGPRIVACY_LINKAGE_KEY" ] || echo $(abspath $(LINKAGE_KEY_FILE)))} \
		EEGPRIVACY_STAGE_LOG=$(abspath $(STAGE_LOG)) EEGPRIVACY_REPRODUCE_PLAN=$(abspath $(REPRODUCE_PLAN)); \
	$(BIN)/python benchmarks/reproduce_times.py plan --start $$start --out $(REPRODUCE_PLAN) --profile $(PROFILE) \
		--repro-args="$(REPRO_ARGS)" || rm -f $(REPRODUCE_PLAN); \
	$(DVC_RUN); rc=$$?; \
	if [ $$rc -eq 0 ] && [ "$(PROFILE)" = default ]; then \
		missing=$$(EEGPRIVACY_STAGE_LOG= eegprivacy stages --missing-runs | tr '\n' ' '); \
		if [ -n "$${missing// /}" ]; then \
			echo "no MLflow runs yet for: $$missing(DVC skipped them: their outputs match dvc.lock); rerunning them"; \
			$(BIN)/dvc repro --force --single-item $$missing; rc=$$?; \
		fi; \
	fi; \
	if [ $$rc -eq 0 ]; then eegprivacy report; rc=$$?; fi; \
	$(BIN)/python benchmarks/reproduce_times.py record --start $$start --end $$(date +%s.%N) --rc $$rc \
		--stage-log $(STAGE_LOG) --out $(REPRODUCE_WALL) --profile $(PROFILE) --cached-files $$cached || true; \
	exit $$rc

# The end-to-end benchmark: every stage, no cached cell. The caches are moved (not deleted) to data/.cells-<time>/.
reproduce-scratch: $(STAMP)  ## `make reproduce` from scratch (caches moved aside, every stage forced), timed per stage
	@backup=data/.cells-$$(date +%Y%m%dT%H%M%S); moved=; \
	for d in $(CELL_CACHES); do if [ -e $$d ]; then mkdir -p $$backup/$$(dirname $$d) && mv $$d $$backup/$$d && moved=1; fi; done; \
	if [ -n "$$moved" ]; then echo "cell caches moved to $$backup (delete it once you no longer need them)"; fi
	$(MAKE) reproduce REPRO_ARGS="--force $(REPRO_ARGS)"

# The UI serves the store the runs went to: $MLFLOW_TRACKING_URI when set, else the repo's sqlite:///mlflow.db. A
# tracking server (http://...) already serves its own UI, so then only its address is printed.
UI_STORE := $(or $(MLFLOW_TRACKING_URI),sqlite:///mlflow.db)
UI_PORT ?= 5000

ui: $(STAMP)  ## MLflow UI on the project's tracking store ($MLFLOW_TRACKING_URI or mlflow.db), bound to 127.0.0.1
	@case "$(UI_STORE)" in http://*|https://*) \
	  echo "MLFLOW_TRACKING_URI is a tracking server; its UI is at $(UI_STORE)"; exit 0;; esac; \
	echo "MLflow UI: http://127.0.0.1:$(UI_PORT)/#/experiments?workflowType=machine_learning  (store: $(UI_STORE); Ctrl-C stops it)"; \
	echo "  (workflowType=machine_learning opens the runs tables; without it MLflow 3 opens its GenAI pages)"; \
	exec $(BIN)/mlflow ui --backend-store-uri "$(UI_STORE)" --host 127.0.0.1 --port $(UI_PORT) --workers 1

# A throwaway PostgreSQL (loopback only, random password in $(PG_DIR)/pgpass) for trying MLflow and Optuna on a
# server database as on several machines: `make postgres` prints its URLs and the next commands.
PG_DIR := data/postgres

postgres: $(STAMP)  ## start a throwaway local PostgreSQL in data/postgres/ (databases mlflow, optuna); prints the URLs
	$(BIN)/python -m eegprivacy.tracking.postgres start --dir $(PG_DIR)

postgres-stop: $(STAMP)  ## stop the throwaway PostgreSQL and delete its data
	$(BIN)/python -m eegprivacy.tracking.postgres stop --dir $(PG_DIR)

datasets: $(STAMP)  ## list datasets, local presence, versions and subject counts
	$(BIN)/eegprivacy datasets

# BENCH_ARGS: e.g. "--quick" or "--only dp_release,federated" (see `benchmarks/run.py --help`).
bench: $(STAMP)  ## benchmarks: project path vs plain baseline, ratios + peak RSS -> benchmarks/results.json
	$(BIN)/python benchmarks/run.py --out benchmarks/results.json $(BENCH_ARGS)

benchmarks: bench  ## alias of bench

clean-venv:  ## remove .venv
	rm -rf $(VENV)
