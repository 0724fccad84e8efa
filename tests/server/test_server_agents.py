"""Loading a spec directory (every problem at once), serving guards built in code, and the engagement store."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from agentguard import ConfigurationError, Guard, SpecError
from agentguard.server import (
    SCHEMA_SUFFIX,
    EngagementRecord,
    MemoryEngagementStore,
    RunStatus,
    ServedAgent,
    create_app,
    load_agents,
)
from tests.conftest import spec_text
from tests.server.support import ORDER_SCHEMA, SHOP_SPEC, pii_check, shop_runner, write_shop_dir


def test_a_spec_directory_loads_with_its_schemas(tmp_path: Path) -> None:
    write_shop_dir(tmp_path, schema=True)
    (tmp_path / "other.yml").write_text(spec_text("capabilities: {}\n", name="other-agent"))
    (tmp_path / "notes.txt").write_text("not an agent")
    other, shop = load_agents(tmp_path)  # in file name order
    assert (shop.name, other.name) == ("shop-agent", "other-agent")
    assert shop.document == SHOP_SPEC.encode()
    assert shop.input_problems({"order_id": "A-1"}) == []
    assert shop.input_problems({"order_id": "x"}) == ["order_id: 'x' does not match '^[A-Z]-[0-9]+$'"]
    assert other.input_schema is None
    assert other.input_problems(["anything"]) == []


def test_every_problem_of_the_directory_in_one_error(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(spec_text("capabilities: {}\n", name="dup"))
    (tmp_path / "b.yaml").write_text(spec_text("capabilities: {}\n", name="dup"))
    (tmp_path / "c.yaml").write_text("kind: [unclosed")
    (tmp_path / "d.yaml").write_text(
        spec_text('capabilities:\n  x:\n    input_restriction:\n      assertion: "1 +"\n', name="bad-cel")
    )
    (tmp_path / "e.yaml").write_text(spec_text("capabilities: {}\n", name="e-agent"))
    (tmp_path / f"e{SCHEMA_SUFFIX}").write_text('{"type": "objekt"}')
    (tmp_path / "f.yaml").write_text(spec_text("capabilities: {}\n", name="f-agent"))
    (tmp_path / f"f{SCHEMA_SUFFIX}").write_text("[1, 2]")
    (tmp_path / f"ghost{SCHEMA_SUFFIX}").write_text(ORDER_SCHEMA)
    with pytest.raises(SpecError) as caught:
        load_agents(tmp_path)
    problems = caught.value.problems
    by_file = {Path(p.source).name: p for p in problems}
    assert set(by_file) == {
        "b.yaml",
        "c.yaml",
        "d.yaml",
        f"e{SCHEMA_SUFFIX}",
        f"f{SCHEMA_SUFFIX}",
        f"ghost{SCHEMA_SUFFIX}",
    }
    assert "already defined in" in by_file["b.yaml"].reason
    assert "invalid CEL expression" in by_file["d.yaml"].reason
    assert "not a valid JSON Schema" in by_file[f"e{SCHEMA_SUFFIX}"].reason
    assert "must be a JSON object" in by_file[f"f{SCHEMA_SUFFIX}"].reason
    assert "without an agent file" in by_file[f"ghost{SCHEMA_SUFFIX}"].reason
    # create_app and the command line load through the same path: the same single error.
    with pytest.raises(SpecError) as again:
        create_app(tmp_path, shop_runner)
    assert again.value.problems == problems


def test_an_empty_or_missing_directory_is_a_spec_error(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="no agent files"):
        load_agents(tmp_path)
    with pytest.raises(SpecError, match="not a directory"):
        load_agents(tmp_path / "missing")


def test_guard_options_reach_every_guard(tmp_path: Path) -> None:
    write_shop_dir(tmp_path)
    [agent] = load_agents(
        tmp_path,
        unknown_capability="observe",
        cel_backend="cel-python",
        reviewers={"supervisor": lambda r: False},
    )
    agent.guard.register("pii-check", pii_check)
    assert agent.guard.compiled.backend_name == "cel-python"
    with agent.guard.engagement():  # observe: a call outside the capabilities runs (and is recorded)
        assert agent.guard.call("not-a-capability", {}, lambda: "ran") == "ran"


def test_a_guard_built_in_code_serves_its_spec_as_yaml() -> None:
    guard = Guard.from_yaml(SHOP_SPEC)
    agent = ServedAgent.from_guard(guard)
    document = yaml.safe_load(agent.document)
    assert document["name"] == "shop-agent"
    assert document["capabilities"]["refund"]["input_restriction"]["require_review"] == "supervisor"
    assert "collect_results" not in document["capabilities"]["refund"]  # not written, not served
    assert Guard.from_yaml(agent.document.decode()).spec.model_dump() == guard.spec.model_dump()
    assert agent.etag.startswith('"')
    assert agent.etag == ServedAgent.from_guard(guard).etag


def test_create_app_refuses_what_it_cannot_serve() -> None:
    guard = Guard.from_yaml(SHOP_SPEC)
    with pytest.raises(ConfigurationError, match="two served agents are named 'shop-agent'"):
        create_app([guard, ServedAgent.from_guard(Guard.from_yaml(SHOP_SPEC))], shop_runner)
    with pytest.raises(ConfigurationError, match="no agents"):
        create_app([], shop_runner)
    with pytest.raises(ValueError, match="must be positive"):
        create_app([guard], shop_runner, max_concurrency=0)
    with pytest.raises(SpecError, match="not a valid JSON Schema"):
        ServedAgent.from_guard(guard, input_schema={"type": 42})


def record(engagement_id: str, status: RunStatus = RunStatus.RUNNING) -> EngagementRecord:
    now = datetime.now(UTC)
    return EngagementRecord(engagement_id, "shop-agent", status, now, now)


def test_a_record_round_trips_through_json() -> None:
    now = datetime.now(UTC)
    full = EngagementRecord(
        "e1",
        "shop-agent",
        RunStatus.DENIED,
        now,
        now,
        finished_at=now,
        output=None,
        exposes={"lookups": 2},
        error={"type": "RestrictionViolation", "rule": "restriction"},
        review=None,
    )
    assert EngagementRecord.from_json(full.to_json()) == full
    running = record("e2")
    assert EngagementRecord.from_json(running.to_json()) == running
    assert [s.finished for s in RunStatus] == [False, False, True, True, True, True]


def test_the_memory_store_keeps_the_most_recently_updated() -> None:
    store = MemoryEngagementStore(max_records=2)

    async def scenario() -> list[EngagementRecord | None]:
        await store.save(record("a"))
        await store.save(record("b"))
        await store.save(record("a", RunStatus.COMPLETED))  # updating "a" makes "b" the oldest
        await store.save(record("c"))
        return [await store.load(name) for name in ("a", "b", "c")]

    a, b, c = asyncio.run(scenario())
    assert a is not None
    assert a.status is RunStatus.COMPLETED
    assert b is None
    assert c is not None
    with pytest.raises(ValueError, match="max_records"):
        MemoryEngagementStore(max_records=0)
