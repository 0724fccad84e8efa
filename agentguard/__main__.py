"""``python -m agentguard``: the same command line as the ``agentguard`` script."""

from agentguard.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
