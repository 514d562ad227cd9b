"""The catalog's lookups that a dialect asks before anything is reserved (issue 20: OneInfer's checks)."""

from __future__ import annotations

import pytest

from inferplex.catalog import Catalog
from inferplex.config import parse_config
from inferplex.errors import InvalidRequest

CONFIG = {
    "providers": [
        {"name": "openai", "kind": "openai", "base_url": "http://127.0.0.1:9/v1"},
        {"name": "vectors", "kind": "openai", "base_url": "http://127.0.0.1:9/v1"},
    ],
    "models": [
        {"name": "embedder", "type": "embedding", "deployments": [{"provider": "openai", "model": "e"}]},
        {"name": "mini", "deployments": [{"provider": "openai", "model": "m", "id": "ep-mini"}]},
        {"name": "big", "deployments": [{"provider": "openai", "model": "b"}]},
        {"name": "only-vectors", "type": "embedding", "deployments": [{"provider": "vectors", "model": "v"}]},
    ],
}


@pytest.fixture
def catalog() -> Catalog:
    return Catalog(parse_config(CONFIG, "<test>"))


def test_a_providers_default_model_is_its_first_chat_model(catalog: Catalog) -> None:
    assert catalog.default_model("openai") == "mini"
    with pytest.raises(InvalidRequest) as refused:
        catalog.default_model("vectors")
    assert refused.value.param == "model" and "serves no chat model" in refused.value.message


def test_an_endpoint_id_must_be_configured(catalog: Catalog) -> None:
    catalog.check_endpoint("ep-mini")
    with pytest.raises(InvalidRequest) as refused:
        catalog.check_endpoint("ep-nope")
    assert (refused.value.status, refused.value.code, refused.value.param) == (400, "endpoint_not_found", "endpoint_id")
