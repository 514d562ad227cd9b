"""The closed, fault-prefixed error types that label metrics and logs (observe/faults.py)."""

from __future__ import annotations

import pytest

from inferplex import errors
from inferplex.observe.faults import ERROR_TYPES, FAULTS, error_type, fault_of

CASES = [
    (errors.InvalidRequest("bad"), 400, "caller.invalid_request"),
    (errors.ContextLengthExceeded("long"), 400, "caller.invalid_request"),
    (errors.NotFound("no model"), 404, "caller.not_found"),
    (errors.PayloadTooLarge("big"), 413, "caller.too_large"),
    (errors.UnsupportedMediaType("xml"), 415, "caller.unsupported_media_type"),
    (errors.UnsupportedLanguage("tlh"), 422, "caller.invalid_request"),
    (errors.Unauthenticated("who"), 401, "policy.unauthenticated"),
    (errors.PermissionDenied("scope"), 403, "policy.permission_denied"),
    (errors.PermissionDenied("poor", code="insufficient_credits"), 403, "policy.insufficient_credits"),
    (errors.SpendingCapReached("cap", request_id="req_1"), 402, "policy.spending_cap"),
    (errors.RateLimited("slow down"), 429, "policy.rate_limited"),
    (errors.ProcessorRejected("pii"), 422, "policy.processor_rejected"),
    (errors.UpstreamError("boom", upstream_status=500), 502, "provider.upstream_error"),
    (errors.UpstreamTimeout("late"), 504, "provider.timeout"),
    (errors.Unavailable("cooling"), 503, "provider.unavailable"),
    (errors.Unavailable("db", code="store_unavailable"), 503, "gateway.store_unavailable"),
    (errors.InternalError("bug"), 500, "gateway.internal"),
    (None, 200, None),
    (None, 499, "caller.disconnected"),
    (None, 405, "caller.not_found"),
    (None, 418, "caller.invalid_request"),
    (None, 507, "gateway.internal"),
]


@pytest.mark.parametrize(("error", "status", "expected"), CASES)
def test_each_error_has_its_closed_type(error: errors.GatewayError | None, status: int, expected: str | None) -> None:
    assert error_type(error, status) == expected


def test_every_type_is_in_the_closed_list_and_prefixed_by_a_fault() -> None:
    produced = {error_type(e, s) for e, s, _ in CASES} - {None}
    assert produced <= set(ERROR_TYPES)
    assert {fault_of(t) for t in ERROR_TYPES} == set(FAULTS)
    assert fault_of(None) is None


def test_a_providers_own_code_never_becomes_a_label() -> None:
    err = errors.UpstreamError("quota", upstream_status=429, code="some_vendor_specific_code_12345")
    assert error_type(err, 502) == "provider.upstream_error"


def test_a_finished_request_is_typed_the_same_way_by_every_sink() -> None:
    from inferplex.context import Context
    from inferplex.observe.faults import of_request

    assert of_request(Context(), 200) is None
    assert of_request(Context(), 499) == "caller.disconnected"
    assert of_request(Context(error=errors.RateLimited("slow")), 429) == "policy.rate_limited"
    assert of_request(Context(), 404) == "caller.not_found"  # answered without a GatewayError (Starlette's 404)
    midway = Context(failure=errors.UpstreamTimeout("stalled"))
    assert of_request(midway, 200) == "provider.timeout"  # a stream that failed after its first byte
