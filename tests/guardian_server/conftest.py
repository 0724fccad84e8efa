"""Fixtures of the reference guardian's tests: the marker rules and an in-process client."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from agentguard.guardian.server import GuardianRules, create_app, parse_rules
from tests.guardian_server.support import MARKER_RULES


@pytest.fixture(scope="session")
def marker_rules() -> GuardianRules:
    return parse_rules(MARKER_RULES, source="marker-rules.yaml")


@pytest.fixture
async def asgi_client(marker_rules: GuardianRules) -> AsyncIterator[httpx.AsyncClient]:
    """An in-process client of a guardian with the marker rules and no token."""
    transport = httpx.ASGITransport(app=create_app(marker_rules, version="9.9.9-test"))
    async with httpx.AsyncClient(transport=transport, base_url="http://guardian") as client:
        yield client
