"""Fixtures for the CEL layer: every backend test runs on each installed engine."""

from __future__ import annotations

import importlib.util

import pytest

from agentguard.cel import CelBackend, get_backend

BACKENDS = ["cel-expr-python", "cel-python"]
_MODULES = {"cel-expr-python": "cel_expr_python", "cel-python": "celpy"}

_REPORT = pytest.StashKey[list[str]]()


@pytest.fixture(params=BACKENDS)
def backend_name(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    if importlib.util.find_spec(_MODULES[name]) is None:
        pytest.skip(f"{_MODULES[name]} is not installed")
    return name


@pytest.fixture
def backend(backend_name: str) -> CelBackend:
    return get_backend(backend_name)


@pytest.fixture(scope="session")
def conformance_report(pytestconfig: pytest.Config) -> list[str]:
    """Lines the conformance tests want shown in the terminal summary (rates are the point of them)."""
    return pytestconfig.stash.setdefault(_REPORT, [])


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    lines = config.stash.get(_REPORT, [])
    if lines:
        terminalreporter.section("CEL specification conformance")
        for line in lines:
            terminalreporter.write_line(line)
