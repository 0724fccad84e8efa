"""Every ```python and ```bash block in README.md and docs/*.md runs as written, so the docs cannot rot.

**Marking a fragment.** A block that is an illustration rather than a program -- it calls the reader's own
functions, or serves until stopped -- has an HTML comment starting with ``<!-- fragment`` on the line just
before its opening fence, saying why::

    <!-- fragment: calls the reader's own reviewer -->
    ```python
    guard = Guard.from_file("agent.yaml", reviewers={"supervisor": my_reviewer})
    ```

Fragments are not run, and they are listed in :data:`FRAGMENTS` by file and first line: the test fails when a
marked block is not listed there or a listed one is gone, so a fragment is always declared on purpose.

**Where blocks run.** Each block runs in a fresh interpreter (``bash -e`` for bash) in a temporary directory
that stands for a reader's checkout: ``examples/`` and ``.venv/`` link to the repository's, ``agent.yaml`` is
the example support agent, and ``.venv/bin`` comes first on ``PATH``. Relative paths resolve as from the
repository's root, and nothing a block writes lands in the repository.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROOT

DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(python|bash)[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
FRAGMENT_MARK = "<!-- fragment"

FRAGMENTS = [
    (
        "README.md",
        "scripts/demo     # set up .venv, then run the guarded LangChain support agent (agentguard-langchain-demo)",
    ),
    (
        "README.md",
        ".venv/bin/agentguard guardian --rules rules.yaml --port 8700      # the reference AOS guardian",
    ),
    ("README.md", "from agentguard.stores import RedisStore"),
    ("docs/audit.md", "from agentguard import Guard, User"),
    ("docs/formats.md", "from agentguard import Guard"),
    ("docs/formats.md", '(mail_approval,) = load_descriptor("mailcomposer.json").interrupts'),
    (
        "docs/guardian.md",
        "agentguard guardian --rules rules.yaml --host 127.0.0.1 --port 8700 "
        "[--token-env GUARDIAN_TOKEN] [--workers 2]",
    ),
    ("docs/guide.md", "from agentguard import Guard"),
    ("docs/guide.md", 'with guard.engagement(user=User(id="u1", email="ann@corp.com")) as eng:'),
    ("docs/guide.md", "from agentguard import CheckResult, RuleContext"),
    (
        "docs/guide.md",
        'Guard.from_file("agent.yaml", severity={"restriction": "warning", "restriction:refund": "error",',
    ),
    ("docs/guide.md", "from agentguard.runs import Cancel, Retry, Timeout"),
    ("docs/guide.md", "from agentguard import Guard, ValueLimits"),
    ("docs/server.md", "from agentguard.server import create_app, load_agents"),
    ("docs/stores.md", "from agentguard import Guard, User"),
    ("docs/server.md", "import json"),
    ("docs/server.md", "from agentguard.remote import RemoteLimits, attach_remote_agents"),
    (
        "docs/server.md",
        "from agentguard.serving import BodyDeadline, RequireBearerToken, ServerLimits, aserve, bounded_config",
    ),
]
"""(file, first line) of every block marked ``<!-- fragment``."""


@dataclass(frozen=True)
class Block:
    file: str
    line: int
    language: str
    code: str
    fragment: bool

    @property
    def first_line(self) -> str:
        return self.code.strip().splitlines()[0]

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


def _blocks() -> list[Block]:
    blocks = []
    for document in DOCUMENTS:
        text = document.read_text()
        for match in FENCE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
            blocks.append(
                Block(
                    str(document.relative_to(ROOT)),
                    line,
                    match.group(1),
                    match.group(2),
                    before.lstrip().startswith(FRAGMENT_MARK),
                )
            )
    return blocks


BLOCKS = _blocks()


def test_the_fragments_are_exactly_the_declared_ones() -> None:
    marked = [(block.file, block.first_line) for block in BLOCKS if block.fragment]
    assert sorted(marked) == sorted(FRAGMENTS), (
        "mark a fragment in the Markdown and list it in FRAGMENTS, or neither"
    )


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A directory that looks like a reader's checkout of the repository (see the module docstring)."""
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    (tmp_path / ".venv").symlink_to(Path(sys.executable).parent.parent)
    shutil.copy(ROOT / "examples" / "support-agent" / "agent.yaml", tmp_path / "agent.yaml")
    return tmp_path


@pytest.mark.parametrize("block", [b for b in BLOCKS if not b.fragment], ids=str)
def test_the_block_runs_as_written(block: Block, checkout: Path) -> None:
    command = (
        [sys.executable, "-c", block.code] if block.language == "python" else ["bash", "-e", "-c", block.code]
    )
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    result = subprocess.run(
        command, cwd=checkout, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, f"{block} failed:\n{result.stdout}\n{result.stderr}"
