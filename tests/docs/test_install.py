"""The install instructions work while dbscheduler is not on PyPI: the home page and Getting
started install it from a checkout or a wheel, never by a bare name the index does not have."""

from __future__ import annotations

import re

import pytest

from tests.docs.pages import DOCS, steps

PAGES = ["index.md", "getting-started/index.md", "getting-started/postgresql.md",
         "guides/django.md"]
FROM_A_FILE = re.compile(r"\s(?:-e\s+\S*/|\S*\.whl|\"?\S+ @ file://|/)")


@pytest.mark.parametrize("page", PAGES)
def test_install_lines_name_a_checkout_or_a_wheel(page: str) -> None:
    lines = [line.strip() for step in steps(DOCS / page) if step.kind in ("shell", "console")
             for line in step.code.splitlines() if "pip install" in line]
    assert lines, f"docs/{page} shows no install line"
    from_the_index = [line for line in lines if not FROM_A_FILE.search(line.split("#")[0])]
    assert not from_the_index, (
        f"docs/{page} installs dbscheduler from PyPI, which does not have it: {from_the_index}")
