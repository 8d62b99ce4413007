"""The ranges of the fixed-width numbers repo-builder checks values against: the one home of these constants.

Vendored with the runtime and standard library only, so the render-time layers (``profile/``: parameter
values; ``client/``, ``openai/``: request fields) import it without pulling in numpy, and the served models
(``limits.py``: request limits; the ledgers' 64-bit hashes and masks) read the same numbers.
"""

from __future__ import annotations

#: Largest int32: Triton's INT32 inputs, the backends' ``std::stoi`` parameters, config.pbtxt's 32-bit fields.
INT32_MAX = 2**31 - 1
#: Largest int64 (a signed 64-bit word).
INT64_MAX = 2**63 - 1
#: Largest uint32: the trtllm-0.5 profile's UINT32 inputs.
UINT32_MAX = 2**32 - 1
#: Largest uint64 (seeds, task ids, 64-bit hashes; as a mask, the low 64 bits).
UINT64_MAX = 2**64 - 1
#: Largest finite float32: FP32 inputs (a larger JSON real arrives as inf), the C++ backend's ``std::stof``
#: float parameters.
FLOAT32_MAX = 3.4028234663852886e38
