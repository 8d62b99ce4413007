"""What ``repo-builder adopt`` produces (:mod:`.adopt`, which re-exports these names): :class:`Adoption` (profile,
values, findings, models by role), :class:`AdoptedModel`, :class:`Finding` (file, key, message, kind),
:class:`AdoptError`, and the facts adopt matches against (NVIDIA's pristine ``model.py`` hashes, the role
order, the path parameters).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import RepoBuilderError

if TYPE_CHECKING:  # pragma: no cover
    pass


#: sha256 of NVIDIA's pristine ``model.py`` files, per tensorrtllm_backend tag and model (facts: the files
#: ``all_models/inflight_batcher_llm/<model>/1/model.py`` at tags v0.5.0 and v0.19.0 of
#: triton-inference-server/tensorrtllm_backend). A ``model.py`` of a known model with none of these hashes is a
#: hand edit (or a tag adopt does not know); repo-builder's own models replace them either way.
PRISTINE_MODEL_PY: dict[str, dict[str, str]] = {
    "v0.5.0": {
        "preprocessing": "548a4a6ed8c736b8c41a44b68b60832cc571f19735b0f2152ee15e7a7ff09bac",
        "postprocessing": "a5330c982bf0f69d069a3df8be14aa5d1deb19d75cc4e22ba00eedb5b1d4b8a7",
    },
    "v0.19.0": {
        "preprocessing": "aa202f9945133a6e1d80f3ef9f9aafd10009a8eb9c3df149b8ba52bd01ce815d",
        "postprocessing": "1f3c399baca771ff52a4305ae148c2345023c95bed1349ac6dcd10ffc1321298",
        "tensorrt_llm": "9240af83e0c15d66b0abc543bf92c128cc575d56c005be3fc12713b75d9be66e",
        "tensorrt_llm_bls": "347063f164b57e69034456713822212e63c1c2401d6bea55033062d948196d81",
    },
}

#: The order in which models are asked for a value that several of them carry (tokenizer_dir in pre- and
#: postprocessing, max_beam_width in the engine and the BLS, triton_max_batch_size in all): the engine first.
ROLE_ORDER = ("tensorrt_llm", "preprocessing", "postprocessing", "tensorrt_llm_bls", "ensemble")

#: Parameters whose value is the engine's or the tokenizer's path: they come from ``render --engine-dir`` /
#: ``--tokenizer-dir``, so they go into the values file's ``adopted_from`` block, not among the values.
PATH_PARAMETERS = ("engine_dir", "tokenizer_dir")


class AdoptError(RepoBuilderError):
    """A repository cannot be adopted: not a model repository, a config that does not parse, two versions
    mixed, or an engine that contradicts the filled values."""


@dataclass(frozen=True)
class Finding:
    """Something adopt could not place: ``file`` relative to the repository, ``key`` the config key or field."""

    file: str
    key: str
    message: str
    kind: str  # unknown_key | placeholder | refused | disagree | hand_edit | extra_model | engine | dropped

    def __str__(self) -> str:
        return f"{self.file}: {self.key}: {self.message}"


@dataclass
class AdoptedModel:
    """One model of the repository: its folder name, role (``None`` = an extra model) and parsed config."""

    name: str
    role: str | None
    rel: str
    config: Any
    text: str


@dataclass
class Adoption:
    """What :func:`adopt_repository` found.

    Attributes:
        repo: the repository (absolute).
        profile: the recognised profile (``trtllm-0.5`` or ``trtllm-1.2``).
        tag: the NVIDIA tag whose pristine ``model.py`` files the repository holds, or None.
        values: {parameter: typed value} for ``render --values`` (paths excluded, see ``paths``).
        paths: facts of the repository that are not values: ``engine_dir``/``tokenizer_dir`` (as written there,
            or as given), ``backend`` (the engine model's; render decides it from the engine's kind).
        where: {parameter: "file: key"} where each value was read.
        findings: what could not be placed.
        models: {role or extra name: AdoptedModel}.
    """

    repo: Path
    profile: str
    tag: str | None
    values: dict[str, Any]
    paths: dict[str, str]
    where: dict[str, str]
    findings: list[Finding] = field(default_factory=list)
    models: dict[str, AdoptedModel] = field(default_factory=dict)

    def values_document(self) -> dict[str, Any]:
        """The values file's content: ``adopted_from`` (provenance, read by render into the lock file) and every
        recovered value, sorted by name."""
        doc: dict[str, Any] = {
            "adopted_from": {
                "repository": str(self.repo),
                "profile": self.profile,
                "nvidia_tag": self.tag,
                **{k: v for k, v in sorted(self.paths.items())},
                "findings": len(self.findings),
            }
        }
        doc.update(sorted(self.values.items()))
        return doc
