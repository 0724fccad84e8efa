"""A hostile client against the OpenAgentSpec server over a real socket on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from agentguard.cli import main
from agentguard.errors import ConfigurationError
from agentguard.server import RunningServer, create_app, serve_in_thread
from agentguard.spec import parse_reference
from tests.server.support import shop_agents, shop_runner

FORGED = {"Host": "evil.example", "X-Forwarded-Host": "evil.example", "X-Forwarded-Proto": "https"}


@pytest.fixture(scope="module")
def specs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("specs")


@pytest.fixture(scope="module")
def server(specs: Path) -> Iterator[RunningServer]:
    with serve_in_thread(create_app(shop_agents(specs), shop_runner)) as running:
        yield running


@pytest.fixture(scope="module")
def public_server(specs: Path) -> Iterator[RunningServer]:
    app = create_app(shop_agents(specs), shop_runner, public_url="https://agents.corp.example/shop/")
    with serve_in_thread(app) as running:
        yield running


def test_the_index_never_names_the_host_a_client_sent(server: RunningServer) -> None:
    """``GET /agents`` built each agent's URL from the request's ``Host``: a client that sent
    ``Host: evil.example`` got ``http://evil.example/agents/shop-agent`` and ``oagent://evil.example/...``,
    which a cache keeps for everyone and a peer that follows it sends its input (and token) to. Without a
    configured public URL the index gives a relative URL and no reference."""
    with httpx.Client(base_url=server.url, timeout=15) as http:
        response = http.get("/agents", headers=FORGED)
    assert response.status_code == 200
    assert "evil" not in response.text
    [entry] = response.json()
    assert (entry["url"], entry["reference"]) == ("/agents/shop-agent", None)


def test_the_index_names_the_configured_public_url(public_server: RunningServer) -> None:
    with httpx.Client(base_url=public_server.url, timeout=15) as http:
        response = http.get("/agents", headers=FORGED)
    [entry] = response.json()
    assert entry["url"] == "https://agents.corp.example/shop/agents/shop-agent"
    reference = parse_reference(entry["reference"])
    assert (reference.kind, reference.name, reference.url) == ("remote", "shop-agent", entry["url"])


@pytest.mark.parametrize(
    "url",
    [
        "agents.corp.example",
        "ftp://agents.corp.example",
        "https://u:p@agents.corp.example",
        "https://agents.corp.example/?x=1",
        "https://agents.corp.example/\r\nX: y",
        "https:///path",
    ],
)
def test_a_public_url_that_no_index_could_carry_is_refused(specs: Path, url: str) -> None:
    with pytest.raises(ConfigurationError, match="public_url"):
        create_app(shop_agents(specs), shop_runner, public_url=url)


@pytest.mark.parametrize("number", ["9007199254740993", "-9007199254740993", "1" + "0" * 30])
def test_an_input_integer_peers_read_differently_is_refused(server: RunningServer, number: str) -> None:
    """``{"order_id": 9007199254740993}`` is that number to this server and ``9007199254740992`` to a
    JavaScript client, proxy or guardian: the input schema and the runner would see another input than
    the one its sender checked. It is refused before any engagement starts."""
    body = '{"order_id": "A-1", "amount": ' + number + "}"
    with httpx.Client(base_url=server.url, timeout=15) as http:
        response = http.post("/agents/shop-agent", content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 400
    assert "parsers read differently" in response.json()["error"]


def test_the_command_line_refuses_a_public_url_no_index_could_carry(
    specs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runner = "tests.server.support:shop_runner"
    args = [
        "serve",
        "--spec-dir",
        str(specs),
        "--runner",
        runner,
        "--setup",
        "tests.server.support:shop_setup",
    ]
    assert main([*args, "--public-url", "https://agents.corp.example/?next=evil"]) == 2
    assert "public_url must be an http(s) URL" in capsys.readouterr().err
