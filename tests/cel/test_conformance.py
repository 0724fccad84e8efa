"""The CEL specification's own conformance cases, run through agentguard's CEL API.

The cases (google/cel-spec ``tests/simple/testdata``, extracted to JSON) are kept in the repository, in
``tests/conformance/cel/cases.json``; ``tests/conformance/README.md`` gives their source, version, license and
format. Only the core-language
files are run; extension libraries are not part of what agentguard offers.

How a case maps onto agentguard:

* Declarations come from the case's ``type_env``: ``int``, ``string``, ``bool`` and ``timestamp`` become
  the matching :class:`VarType`; everything else (``uint``, ``double``, ``bytes``, ``null``, lists, maps)
  is declared ``DYN``, which is how agentguard declares JSON data.
* Bindings and expected values are compared as agentguard's plain Python values: a CEL ``uint`` is an
  ``int``, a type value is its name. Otherwise types must match exactly (``1`` is not ``1.0``).
* An expected error is met by a compile error or an evaluation error: agentguard type-checks at load time,
  so where the specification expects an expression to fail when run, refusing it earlier is stricter.
* Cases marked ``disable_check`` that expect a value test an evaluator running expressions a type checker
  would reject (``'horses' && false``). agentguard always checks, so when the backend's checker refuses
  such a case it is counted as *not applicable*, reported, and left out of the rate.
"""

from __future__ import annotations

import base64
import collections
import datetime as dt
import json
import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from agentguard.cel import CelBackend, CelCompileError, CelEvaluationError, VarType

CASES_FILE = Path(__file__).resolve().parents[1] / "conformance" / "cel" / "cases.json"

CORE_FILES = (
    "basic",
    "comparisons",
    "logic",
    "string",
    "lists",
    "macros",
    "macros2",
    "conversions",
    "integer_math",
    "fp_math",
    "fields",
    "timestamps",
    "parse",
    "plumbing",
)

# Lowest acceptable pass rate over the applicable cases. The default backend's is the project's promise;
# the fallback's sits just under what it measures (92.9 % on cel-python 0.5), to catch regressions.
FLOORS = {"cel-expr-python": 0.99, "cel-python": 0.925}

_VAR_TYPES = {
    "int": VarType.INT,
    "string": VarType.STRING,
    "bool": VarType.BOOL,
    "timestamp": VarType.TIMESTAMP,
}


@cache
def core_cases() -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = json.loads(CASES_FILE.read_text(encoding="utf-8"))
    return [case for case in cases if case["file"] in CORE_FILES]


def declarations(type_env: dict[str, Any]) -> dict[str, VarType]:
    return {
        name: _VAR_TYPES.get(cel_type, VarType.DYN) if isinstance(cel_type, str) else VarType.DYN
        for name, cel_type in type_env.items()
    }


def to_python(tagged: dict[str, Any]) -> Any:
    """A tagged conformance value as the plain Python value agentguard uses for it."""
    kind = tagged["t"]
    if kind in ("int", "uint"):
        return int(tagged["v"])
    if kind == "double":
        return float(tagged["v"])  # also "NaN", "Infinity", "-Infinity"
    if kind in ("string", "bool", "type"):
        return tagged["v"]
    if kind == "null":
        return None
    if kind == "bytes":
        return base64.b64decode(tagged["v"])
    if kind == "list":
        return [to_python(item) for item in tagged["v"]]
    if kind == "map":
        return {to_python(key): to_python(value) for key, value in tagged["v"]}
    if kind == "timestamp":
        epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
        return epoch + dt.timedelta(seconds=tagged.get("s", 0), microseconds=tagged.get("n", 0) // 1000)
    if kind == "duration":
        return dt.timedelta(seconds=tagged.get("s", 0), microseconds=tagged.get("n", 0) // 1000)
    raise ValueError(f"unknown tagged value kind {kind!r}")


def matches(expected: dict[str, Any], actual: Any) -> bool:
    """Equal and of the same plain type; ``==`` alone would accept ``1 == 1.0`` and ``True == 1``."""
    kind = expected["t"]
    if kind == "double":
        want = float(expected["v"])
        return type(actual) is float and (actual == want or (math.isnan(want) and math.isnan(actual)))
    if kind == "list":
        items = expected["v"]
        return type(actual) is list and len(actual) == len(items) and all(map(matches, items, actual))
    if kind == "map":
        pairs = expected["v"]
        return (
            type(actual) is dict
            and len(actual) == len(pairs)
            and all(
                to_python(key) in actual and matches(value, actual[to_python(key)]) for key, value in pairs
            )
        )
    want = to_python(expected)
    return type(actual) is type(want) and actual == want


@dataclass
class Outcome:
    case: dict[str, Any]
    status: str  # "pass", "fail" or "n/a"
    detail: str = ""


def run(backend: CelBackend, case: dict[str, Any]) -> Outcome:
    expect = case["expect"]
    try:
        program = backend.compile(case["expr"], declarations(case["type_env"]))
        result = program.evaluate({name: to_python(value) for name, value in case["bindings"].items()})
    except CelCompileError as error:
        if "error" in expect:
            return Outcome(case, "pass")
        return Outcome(case, "n/a" if case["disable_check"] else "fail", f"compile error: {error.message}")
    except CelEvaluationError as error:
        return Outcome(case, "pass" if "error" in expect else "fail", f"evaluation error: {error.message}")
    if "error" in expect:
        return Outcome(case, "fail", f"expected an error, got {result!r}")
    if matches(expect["value"], result):
        return Outcome(case, "pass")
    return Outcome(case, "fail", f"expected {to_python(expect['value'])!r}, got {result!r}")


@pytest.fixture(scope="module")
def cases() -> list[dict[str, Any]]:
    if not CASES_FILE.is_file():
        pytest.fail(f"conformance data not found at {CASES_FILE}")
    return core_cases()


def test_all_core_files_are_present(cases: list[dict[str, Any]]) -> None:
    assert {case["file"] for case in cases} == set(CORE_FILES)


def test_conformance_rate(
    backend: CelBackend, backend_name: str, cases: list[dict[str, Any]], conformance_report: list[str]
) -> None:
    outcomes = [run(backend, case) for case in cases]
    counts = collections.Counter(outcome.status for outcome in outcomes)
    applicable = counts["pass"] + counts["fail"]
    rate = counts["pass"] / applicable
    summary = (
        f"{backend_name}: {counts['pass']}/{applicable} = {rate:.2%} of applicable core cases "
        f"({counts['n/a']} not applicable of {len(cases)}; {counts['pass'] / len(cases):.2%} of all)"
    )
    conformance_report.append(summary)
    failures = [outcome for outcome in outcomes if outcome.status == "fail"]
    by_file = collections.Counter(outcome.case["file"] for outcome in failures)
    conformance_report.append(
        "    failures by file: " + ", ".join(f"{f} {n}" for f, n in by_file.most_common())
    )
    print(summary)
    listing = "\n".join(
        f"  {o.case['file']}/{o.case['section']}/{o.case['name']}: {o.case['expr']!r}: {o.detail}"
        for o in failures
    )
    assert rate >= FLOORS[backend_name], f"{summary}; failures:\n{listing}"
