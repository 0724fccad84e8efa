"""OS Protocol checks: rule results, judges and audit reports for guarded engagements.

Every decision the Guard records can be read as an OS Protocol ``RuleResult``; a ``Judge`` (LLM-as-judge,
or an AOS guardian) can check tool results as a guard rule; and each engagement can leave an audit report,
a markdown file whose YAML frontmatter is an OS Protocol ``AuditEntry``::

    from agentguard import Guard, User
    from agentguard.checks import Audit, AuditObserver, GuardianJudge, JudgeConfig, add_judge, rule_results

    guard = Guard.from_file("agent.yaml", observers=[AuditObserver("audit/", agent_id="support-agent")])
    add_judge(guard, GuardianJudge(client), JudgeConfig(criteria="No personal data."), name="no-pii")

    with guard.engagement(user=User(id="u1")) as eng:
        ...
    [r.rule_name for r in rule_results(eng) if not r.passed]     # e.g. ['restriction:send-email:input']
    Audit.query("audit/", opinion="adverse")                     # the reports of engagements that broke policy

The ``ruleName`` scheme is in :mod:`agentguard.checks._rules`; the opinion and findings mappings in
:mod:`agentguard.checks._audit` and ``docs/audit.md``; the command line is ``agentguard audit``.
"""

from agentguard.checks._audit import (
    Audit,
    AuditEntry,
    AuditFindings,
    AuditFormatError,
    AuditObserver,
    AuditOpinion,
    AuditQuery,
    AuditReport,
    build_report,
    finding_of,
    opinion_of,
    write_report,
)
from agentguard.checks._judge import (
    DEFAULT_THRESHOLD,
    GuardianJudge,
    Judge,
    JudgeConfig,
    JudgeResult,
    add_judge,
    judge_tool,
)
from agentguard.checks._rules import RuleResult, RuleSeverity, rule_name, rule_result, rule_results

__all__ = [
    "DEFAULT_THRESHOLD",
    "Audit",
    "AuditEntry",
    "AuditFindings",
    "AuditFormatError",
    "AuditObserver",
    "AuditOpinion",
    "AuditQuery",
    "AuditReport",
    "GuardianJudge",
    "Judge",
    "JudgeConfig",
    "JudgeResult",
    "RuleResult",
    "RuleSeverity",
    "add_judge",
    "build_report",
    "finding_of",
    "judge_tool",
    "opinion_of",
    "rule_name",
    "rule_result",
    "rule_results",
    "write_report",
]
