"""The canonical core's types (issue 20, item 1): what each stage reads is a typed field, not a string key.

A key's settings travel on its `Principal` as typed fields, worked out once per key record; the request's
gateway options travel on the `Context` as typed fields; the answers the gateway builds are described by
`inferplex.responses`, checked here against real answers of the running gateway.
"""

from __future__ import annotations

from inferplex.accounts.auth import principal_of
from inferplex.accounts.limits import LimitPlan, Limits
from inferplex.auth import MASTER
from inferplex.context import Context
from inferplex.routing.options import RouteOptions
from inferplex.store.keys import AccountLimits, KeyRecord


def test_a_keys_limits_and_processors_are_typed_fields_of_its_principal() -> None:
    record = KeyRecord(
        id="k1",
        hash="h",
        prefix="p",
        name="n",
        account_id="a1",
        default_processors=["secret_scan"],
        enforced_processors=[{"name": "pii_redact", "mode": "mask"}],
        rpm=5,
        max_concurrent=2,
    )
    principal = principal_of(record, AccountLimits(tpm=1000))
    assert principal.limits == LimitPlan.of([("key:k1", Limits(5, None, 2)), ("acct:a1", Limits(None, 1000, None))])
    assert principal.default_processors == ("secret_scan",)
    assert principal.enforced_processors == ({"name": "pii_redact", "mode": "mask"},)
    assert not hasattr(principal, "settings")


def test_the_master_key_has_no_limits_and_no_processors() -> None:
    assert MASTER.limits == LimitPlan()
    assert MASTER.default_processors == MASTER.enforced_processors == ()


def test_a_requests_gateway_state_is_typed_fields_of_its_context() -> None:
    ctx = Context()
    assert ctx.route is None and ctx.prompt_tokens_estimate == 0
    ctx.route = RouteOptions(service_tier="flex")
    assert ctx.route.service_tier == "flex"
    assert not hasattr(ctx, "options")
