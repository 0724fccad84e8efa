"""A call to a tool name the server never listed makes the guard read the server's tool list, but no more often
than ``relist_interval`` (and no more than ``max_listing_pages`` pages): a model that loops over made-up names
must not make the guard flood the server with listings. Each refused call is a recorded capability denial.
Against the names server as a real subprocess that counts the ``tools/list`` requests it answers."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from agentguard_mcp import GuardedClient
from mcp import Client, StdioServerParameters
from mcp_types import CallToolResult

from agentguard import Guard, Outcome, Rule

HERE = Path(__file__).resolve().parent
SPEC = HERE / "names-agent.yaml"
PROXY = shutil.which("agentguard-mcp-proxy", path=str(Path(sys.executable).parent))
MADE_UP = [f"made_up_{i}" for i in range(20)]


SAME_CODE = {"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else None
"""The environment a subprocess needs to run the code this test runs (the SDK hands a server few variables)."""


def stdio(command: list[str]) -> StdioServerParameters:
    return StdioServerParameters(command=command[0], args=command[1:], env=SAME_CODE)


def upstream(count: Path, *flags: str) -> list[str]:
    """The names server command, listing ``send_email`` and counting its listings in ``count``."""
    return [sys.executable, str(HERE / "names_server.py"), "--count", str(count), *flags, "send_email"]


def listings(count: Path) -> int:
    return len(count.read_text().splitlines()) if count.exists() else 0


def text(result: CallToolResult) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


async def test_made_up_names_make_the_client_read_the_list_once_per_interval(tmp_path: Path) -> None:
    count = tmp_path / "listed"
    guard = Guard.from_file(SPEC)
    command = upstream(count)
    async with Client(stdio(command)) as client:
        with guard.engagement() as eng:
            tools = GuardedClient(client, guard, relist_interval=3600)
            results = [await tools.call_tool(name, {}) for name in MADE_UP]
            known = await tools.call_tool("send_email", {})
    assert listings(count) == 1  # before: one listing per made-up name
    for name, result in zip(MADE_UP, results, strict=True):
        assert result.is_error
        assert f"the server does not list a tool {name!r}" in text(result)
    assert text(known) == "ran send_email"
    denials = [(d.rule, d.outcome, d.capability) for d in eng.decisions if d.outcome is Outcome.DENY]
    assert denials == [(Rule.CAPABILITY, Outcome.DENY, f"mcp:{name}") for name in MADE_UP]


async def test_concurrent_calls_to_made_up_names_share_one_listing(tmp_path: Path) -> None:
    count = tmp_path / "listed"
    guard = Guard.from_file(SPEC)
    command = upstream(count)
    results: list[CallToolResult] = []
    async with Client(stdio(command)) as client:
        with guard.engagement():
            tools = GuardedClient(client, guard, relist_interval=3600)

            async def call(name: str) -> None:
                results.append(await tools.call_tool(name, {}))

            async with anyio.create_task_group() as calls:
                for name in MADE_UP:
                    calls.start_soon(call, name)
    assert listings(count) == 1
    assert len(results) == len(MADE_UP)
    assert all(result.is_error for result in results)


async def test_the_list_is_read_again_once_the_interval_has_passed(tmp_path: Path) -> None:
    count = tmp_path / "listed"
    guard = Guard.from_file(SPEC)
    command = upstream(count)
    async with Client(stdio(command)) as client:
        with guard.engagement():
            tools = GuardedClient(client, guard, relist_interval=0.01)
            await tools.call_tool("made_up", {})
            await tools.call_tool("made_up", {})  # within the interval: refused against that listing
            await anyio.sleep(0.02)
            await tools.call_tool("made_up", {})
    assert listings(count) == 2


async def test_a_tool_list_that_fails_is_not_asked_for_again_on_every_call(tmp_path: Path) -> None:
    count = tmp_path / "listed"
    guard = Guard.from_file(SPEC)
    async with Client(stdio(upstream(count, "--broken"))) as client:
        with guard.engagement() as eng:
            tools = GuardedClient(client, guard, relist_interval=3600)
            refused = [await tools.call_tool(name, {}) for name in MADE_UP]
    assert listings(count) == 1  # before: one failed listing per call, each call failing with its error
    for result in refused:
        assert result.is_error
        assert "the server's tool list could not be read (MCPError)" in text(result)
        assert "broken" not in text(result)  # the server's words are not quoted
    denials = [d.capability for d in eng.decisions if d.outcome is Outcome.DENY]
    assert denials == [f"mcp:{name}" for name in MADE_UP]


async def test_the_proxy_reads_an_endless_list_at_most_so_many_pages_once_per_interval(
    tmp_path: Path,
) -> None:
    assert PROXY is not None, "agentguard-mcp-proxy is not installed (pip install -e integrations/mcp)"
    count = tmp_path / "listed"
    options = ["--relist-interval", "3600", "--max-listing-pages", "3"]
    proxy = stdio([PROXY, "--spec", str(SPEC), *options, "--", *upstream(count, "--endless")])
    async with Client(proxy) as client:
        results = [await client.call_tool(name, {}) for name in MADE_UP]
    assert listings(count) == 3  # one listing of three pages; before: 100 pages for each call
    for result in results:
        assert result.is_error
        assert "more than 3 pages" in text(result)


@pytest.mark.parametrize(
    "option", [{"relist_interval": 0}, {"relist_interval": float("nan")}, {"max_listing_pages": 0}]
)
async def test_a_listing_bound_that_bounds_nothing_is_refused(option: dict[str, float]) -> None:
    guard = Guard.from_file(SPEC)
    from .names_server import make_server

    async with Client(make_server(["send_email"])) as client:
        with pytest.raises(ValueError, match="positive and finite"):
            GuardedClient(client, guard, **option)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "option", [["--relist-interval", "0"], ["--relist-interval", "inf"], ["--max-listing-pages", "0"]]
)
def test_the_proxy_refuses_a_listing_bound_that_bounds_nothing(option: list[str], tmp_path: Path) -> None:
    assert PROXY is not None
    run = subprocess.run(
        [PROXY, "--spec", str(SPEC), *option, "--", *upstream(tmp_path / "listed")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 2
    assert "must be positive and finite" in run.stderr
    assert listings(tmp_path / "listed") == 0
