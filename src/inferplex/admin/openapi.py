"""The OpenAPI document for the admin API and the token exchange, built from the pydantic body models."""

from __future__ import annotations

from functools import cache
from typing import Any

from inferplex import __version__
from inferplex.admin.models import BODIES

_ERROR = {
    "description": "An OpenAI error object",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
}

# (method, path, summary, body model or None, query parameters)
_OPERATIONS: list[tuple[str, str, str, str | None, list[str]]] = [
    ("post", "/admin/keys", "Create a key (the secret is in this response only)", "KeyCreate", []),
    ("get", "/admin/keys", "List keys", None, ["account_id"]),
    ("get", "/admin/keys/{key_id}", "Get a key", None, []),
    (
        "patch",
        "/admin/keys/{key_id}",
        "Update a key's name, scopes, models, IPs, limits, expiry, tags",
        "KeyUpdate",
        [],
    ),
    ("post", "/admin/keys/{key_id}/revoke", "Revoke a key (and every token minted from it)", None, []),
    ("post", "/admin/keys/{key_id}/rotate", "Replace a key's secret", None, []),
    ("post", "/admin/accounts", "Create an account", "AccountCreate", []),
    ("get", "/admin/accounts", "List accounts", None, []),
    ("get", "/admin/accounts/{account_id}", "An account and its balance", None, []),
    ("patch", "/admin/accounts/{account_id}", "Update an account's name and limits", "AccountUpdate", []),
    ("post", "/admin/accounts/{account_id}/credits", "Top up, refund or adjust credits", "CreditChange", []),
    ("get", "/admin/accounts/{account_id}/ledger", "The account's ledger, newest first", None, ["limit"]),
    ("get", "/admin/usage", "Usage rows", None, ["key_id", "account_id", "model", "since", "until", "limit"]),
    ("get", "/admin/usage/totals", "Usage totals", None, ["by", "key_id", "account_id", "model", "since", "until"]),
    ("post", "/v1/auth/token", "Exchange an API key for a short-lived bearer token", "TokenRequest", []),
]


@cache
def openapi_document() -> dict[str, Any]:
    schemas: dict[str, Any] = {
        name: model.model_json_schema(ref_template="#/components/schemas/{model}") for name, model in BODIES.items()
    }
    schemas["Error"] = {
        "type": "object",
        "properties": {
            "error": {
                "type": "object",
                "properties": {k: {"type": ["string", "null"]} for k in ("message", "type", "param", "code")},
            }
        },
    }
    paths: dict[str, Any] = {}
    for method, path, summary, body, query in _OPERATIONS:
        params = [{"name": p, "in": "path", "required": True, "schema": {"type": "string"}} for p in _path_params(path)]
        params += [{"name": q, "in": "query", "required": False, "schema": {"type": "string"}} for q in query]
        op: dict[str, Any] = {
            "summary": summary,
            "security": [{"bearer": []}],
            "parameters": params,
            "responses": {"200": {"description": "OK"}, "4XX": _ERROR},
        }
        if body is not None:
            op["requestBody"] = {
                "required": method != "post" or body != "TokenRequest",
                "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{body}"}}},
            }
        paths.setdefault(path, {})[method] = op
    return {
        "openapi": "3.1.0",
        "info": {"title": "Inferplex administration", "version": __version__},
        "paths": paths,
        "components": {"schemas": schemas, "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
    }


def _path_params(path: str) -> list[str]:
    return [part[1:-1] for part in path.split("/") if part.startswith("{")]
