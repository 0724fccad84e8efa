"""Sample AOS documents for the tests of :mod:`agentguard.aos`.

``samples.json`` (beside this file) holds one valid request per method, in the specification text's shape,
between them using every data object and most optional members, unknown members and explicit nulls, plus
valid responses of every kind. A test that takes ``sample_request`` or ``sample_response`` runs once per
sample.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

SAMPLES: dict[str, list[dict[str, Any]]] = json.loads(Path(__file__).with_name("samples.json").read_text())


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "sample_request" in metafunc.fixturenames:
        requests = SAMPLES["requests"]
        metafunc.parametrize("sample_request", requests, ids=[r["method"] for r in requests])
    if "sample_response" in metafunc.fixturenames:
        responses = SAMPLES["responses"]
        metafunc.parametrize(
            "sample_response", responses, ids=[f"response{i}" for i in range(len(responses))]
        )


@pytest.fixture
def samples() -> dict[str, list[dict[str, Any]]]:
    """A fresh copy of all samples (tests may change it)."""
    copy: dict[str, list[dict[str, Any]]] = json.loads(json.dumps(SAMPLES))
    return copy


@pytest.fixture
def by_method(samples: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """A fresh copy of the sample request of each method, by method name."""
    return {request["method"]: request for request in samples["requests"]}
