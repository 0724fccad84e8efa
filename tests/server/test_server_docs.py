"""The usage examples of the server's docstrings run as written."""

from __future__ import annotations

import doctest
import textwrap

import agentguard.server
from agentguard import _httputil


def test_package_example_runs() -> None:
    doc = agentguard.server.__doc__
    assert doc is not None
    example = textwrap.dedent(doc.split("::\n", 1)[1].split("\nWhat the runner is", 1)[0])
    exec(compile(example, "agentguard.server example", "exec"), {})


def test_http_helper_doctests() -> None:
    result = doctest.testmod(_httputil)
    assert result.attempted > 0
    assert result.failed == 0
