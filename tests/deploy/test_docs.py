"""docs/deploy.md's config examples are configs the gateway accepts: a renamed or removed field fails here
rather than in an operator's start-up."""

from __future__ import annotations

import re

import pytest
import yaml

from inferplex.config import parse_config
from tests.deploy import files

DOC = files.REPO / "docs" / "deploy.md"
BLOCKS = re.findall(r"```yaml\n(.*?)```", DOC.read_text(), flags=re.S)


def test_the_doc_has_config_examples() -> None:
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("block", BLOCKS)
def test_each_config_example_validates(block: str) -> None:
    parse_config(yaml.safe_load(block), "docs/deploy.md")
