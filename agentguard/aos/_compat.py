"""Read AOS requests written in the published schema's shapes in the shape of the specification's text.

The text and the published JSON Schema disagree on a few wire shapes. agentguard writes the text's shape
(ARCHITECTURE decision 9) and accepts both, so that agents built from either document interoperate. The
rewrites, each applied only when the text's own member is absent:

- ``steps/toolCallResult``: ``params.toolCallResult.{executionId, result}`` -> ``params.{executionId,
  result}``;
- ``steps/message``: ``params.citations`` -> ``params.citation``; no citations at all -> ``citation: []``
  (the schema makes them optional, the text requires the member);
- ``ping``: a top-level ``timestamp`` -> ``params.timestamp``;
- A2A: the schema's ``task/get``, ``task/pushNotificationConfig/{get,set}`` -> ``tasks/...``; ``payload``,
  ``context`` and ``reasoning`` at the top level (the text's §4.8.1 table) -> inside ``params``.
"""

from __future__ import annotations

from typing import Any

from ._methods import A2A_METHODS

__all__ = ["normalize_request"]

_A2A_SCHEMA_SPELLINGS = {
    "task/get": "tasks/get",
    "task/pushNotificationConfig/get": "tasks/pushNotificationConfig/get",
    "task/pushNotificationConfig/set": "tasks/pushNotificationConfig/set",
}
_A2A_TOP_LEVEL = ("payload", "context", "reasoning")


def normalize_request(obj: Any) -> Any:
    """Return ``obj`` rewritten into the text's shape; anything that is not a request comes back unchanged.

    The input is never modified (changed levels are copied); a request already in the text's shape comes
    back equal to it.
    """
    if not isinstance(obj, dict) or not isinstance(obj.get("method"), str):
        return obj
    request = dict(obj)
    method = request["method"] = _A2A_SCHEMA_SPELLINGS.get(obj["method"], obj["method"])
    params = request.get("params")
    if method in A2A_METHODS:
        if "params" not in request and "payload" in request:
            request["params"] = {key: request.pop(key) for key in _A2A_TOP_LEVEL if key in request}
    elif method == "ping":
        if "timestamp" in request and (params is None or isinstance(params, dict)):
            params = params or {}
            if "timestamp" not in params:
                request["params"] = {**params, "timestamp": request.pop("timestamp")}
    elif isinstance(params, dict):
        if method == "steps/toolCallResult":
            nested = params.get("toolCallResult")
            if isinstance(nested, dict) and "executionId" not in params and "result" not in params:
                lifted = {key: value for key, value in params.items() if key != "toolCallResult"}
                request["params"] = {**lifted, **nested}
        elif method == "steps/message" and "citation" not in params:
            lifted = {key: value for key, value in params.items() if key != "citations"}
            request["params"] = {**lifted, "citation": params.get("citations", [])}
    return request
