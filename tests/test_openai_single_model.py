"""The one-model app skeleton of the whisper and multimodal front ends (repo_builder.openai.single_model)."""

from types import SimpleNamespace

from fastapi.testclient import TestClient

from repo_builder.openai.single_model import single_model_app


def _client(api_key: str | None) -> TestClient:
    # port 9 (discard) has nothing listening: the Triton model is never ready
    config = SimpleNamespace(api_key=api_key, grpc_url="127.0.0.1:9")
    app, _check_key, _grpc = single_model_app(config, title="t", served_name="llava", triton_model="ensemble")
    return TestClient(app)


def test_models_lists_the_served_name_and_checks_the_api_key() -> None:
    client = _client("secret")
    refused = client.get("/v1/models")
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "invalid_api_key"
    listed = client.get("/v1/models", headers={"Authorization": "Bearer secret"})
    assert listed.status_code == 200
    assert [m["id"] for m in listed.json()["data"]] == ["llava"]


def test_health_is_503_naming_the_triton_model_when_it_is_not_ready() -> None:
    answer = _client(None).get("/health")
    assert answer.status_code == 503
    assert "'ensemble'" in answer.json()["error"]["message"]
