"""The usage examples in the spec package's docstrings run as written."""

from __future__ import annotations

import doctest
import textwrap

import pytest

import agentguard.spec
from agentguard.spec import _names


def test_names_doctests() -> None:
    result = doctest.testmod(_names)
    assert result.attempted > 0
    assert result.failed == 0


def test_package_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    doc = agentguard.spec.__doc__
    assert doc is not None
    example = textwrap.dedent(doc.split("::\n", 1)[1].split("\nFiles are read", 1)[0])
    namespace: dict[str, object] = {}
    exec(compile(example, "agentguard.spec example", "exec"), namespace)
    assert namespace["program"].evaluate(  # type: ignore[attr-defined]
        {"recent": {"send-email": {"inputs": {"to": "bob@corp.com"}}}}
    )
    assert capsys.readouterr().out.startswith(
        "agent.yaml:9:3: capabilities.Send_Email: key 'Send_Email' is not a valid reference"
    )
