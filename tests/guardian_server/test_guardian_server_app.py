"""The guardian app in-process (httpx's ASGI transport): what a real socket would add nothing to."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from typing import Any

import httpx
import pytest

import agentguard
from agentguard import aos
from agentguard.guardian import server as server_package
from agentguard.guardian.server import ENDPOINTS, GuardianRules, create_app, parse_rules
from agentguard.guardian.server._dispatch import Dispatcher
from tests.guardian_server.support import answer_of, request_for


async def test_ping_reports_the_configured_version(asgi_client: httpx.AsyncClient) -> None:
    answer = answer_of(await asgi_client.post("/aos", json=request_for("ping", 1)))
    assert answer["result"]["version"] == "9.9.9-test"


async def test_the_default_version_is_agentguards() -> None:
    transport = httpx.ASGITransport(app=create_app(GuardianRules()))
    async with httpx.AsyncClient(transport=transport, base_url="http://guardian") as client:
        answer = answer_of(await client.post("/", json=request_for("ping", 1)))
    assert answer["result"]["version"] == agentguard.__version__


async def test_head_is_refused_like_any_other_method(asgi_client: httpx.AsyncClient) -> None:
    response = await asgi_client.head("/")
    assert (response.status_code, response.headers["allow"]) == (405, "POST")


async def test_without_a_token_no_authorization_is_needed(asgi_client: httpx.AsyncClient) -> None:
    response = await asgi_client.post(
        "/", json=request_for("ping"), headers={"Authorization": "Bearer anything"}
    )
    assert response.status_code == 200


async def test_the_a2a_table_shape_is_read_as_params() -> None:
    rules = parse_rules(
        """
        rules:
          - name: to-cakes
            methods: ["message/*"]
            when: params.payload.method == "message/send" && params.context.to.role == "server"
            decision: deny
            message: no cakes today
        """
    )
    text_shape = request_for("message/send", 4)
    table_shape = {key: value for key, value in text_shape.items() if key != "params"} | text_shape["params"]
    transport = httpx.ASGITransport(app=create_app(rules))
    async with httpx.AsyncClient(transport=transport, base_url="http://guardian") as client:
        for request in (text_shape, table_shape):
            answer = answer_of(await client.post("/", json=request))
            assert answer["result"]["decision"] == "deny"


def test_ping_never_reaches_the_rules() -> None:
    rules = parse_rules("default_decision: deny\nrules: [{name: all, decision: deny, message: closed}]")
    body = Dispatcher(rules, "1").handle(
        b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"timestamp":"2025-01-01"}}'
    )
    assert body is not None
    assert isinstance(
        aos.parse_response(httpx.Response(200, content=body).json()), aos.PingRequestSuccessResponse
    )


def test_answers_are_ascii_json_even_for_lone_surrogates() -> None:
    request = request_for("steps/memoryStore", "\ud800-id", memory=["\ud83d\ude00 and \udc00"])
    body = Dispatcher(GuardianRules(), "1").handle(json.dumps(request).encode())  # escaped surrogates
    assert body is not None
    assert body.isascii()
    assert httpx.Response(200, content=body).json()["id"] == "\ud800-id"


def test_create_app_checks_its_limit() -> None:
    with pytest.raises(ValueError, match="max_body_bytes"):
        create_app(GuardianRules(), max_body_bytes=0)


def test_the_endpoints_are_root_and_aos() -> None:
    assert ENDPOINTS == ("/", "/aos")


def test_unknown_names_are_attribute_errors() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        _ = server_package.nothing


def test_the_package_docstring_example_runs() -> None:
    doc = server_package.__doc__ or ""
    example = doc.split("::\n\n", 1)[1].split("\n\nThe rules file", 1)[0]
    exec(compile(textwrap.dedent(example), "agentguard.guardian.server docstring", "exec"), {})


def _modules_after(code: str) -> set[str]:
    script = code + "\nimport sys\nprint(' '.join(sorted(sys.modules)))"
    output = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    return set(output.split())


def test_importing_agentguard_does_not_import_the_server() -> None:
    imported = _modules_after("import agentguard, agentguard.guardian, agentguard.aos")
    assert not {"starlette", "uvicorn", "agentguard.guardian.server"} & imported


def test_the_rules_and_the_cli_load_without_starlette_or_uvicorn() -> None:
    imported = _modules_after(
        "from agentguard.guardian.server import parse_rules\n"
        "from agentguard.guardian.server._cli import add_parser"
    )
    assert "agentguard.guardian.server" in imported
    assert not {"starlette", "uvicorn"} & imported
    assert {"starlette", "uvicorn"} <= _modules_after(
        "from agentguard.guardian.server import create_app, serve_in_thread"
    )


@pytest.mark.parametrize("name", sorted(server_package.__all__))
def test_every_exported_name_resolves(name: str) -> None:
    value: Any = getattr(server_package, name)
    assert value is not None
