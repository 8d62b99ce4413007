"""An OpenAI-compatible HTTP API in front of a rendered repository served by Triton (``repo-builder openai``).

* :mod:`.protocol`: pydantic request models and the OpenAI error shape (no serving code);
* :mod:`.backend`: Triton over gRPC (one ``ModelStreamInfer`` stream per request, grpc.aio);
* :mod:`.router`: the routes, one FastAPI ``APIRouter`` (``/v1/models``, ``/v1/completions``,
  ``/v1/chat/completions``, ``/health``); :mod:`.app`: the small app factory that mounts it;
* :mod:`.served` (models served, routing table), :mod:`.jobs` (request -> ensemble inputs),
  :mod:`.generation` (deltas, usage, disconnect), :mod:`.responses` (bodies and SSE chunks);
* :mod:`.serve`: running it with uvicorn; :mod:`.launch`: starting it beside tritonserver (``launch --openai_port``).

This module imports nothing heavy: ``repo-builder --help`` reads :data:`API_KEY_ENV` from here.
"""

#: Environment variable holding the API key when ``--api-key`` is not given.
API_KEY_ENV = "REPO_BUILDER_OPENAI_API_KEY"
