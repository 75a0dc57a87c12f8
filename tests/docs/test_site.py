"""The documentation site builds strictly, its links lead somewhere, and its reference pages
cover what the code offers.

``mkdocs build --strict`` fails on any warning: a broken link or anchor between pages, a page
missing from the navigation, a cross-reference to an API name that is not documented, a
docstring mkdocstrings cannot read. The built HTML is then checked for every internal link and
anchor, those that the generated pages (API, CLI, REST) add included.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

import dbscheduler
from dbscheduler import Client, Scheduler
from dbscheduler.metrics import PrometheusMetrics
from dbscheduler.web import create_app
from tests.docs.conftest import exclusive, finish_build, shared_dir, start_build
from tests.docs.pages import DOCS

ROOT = DOCS.parent


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site built by ``mkdocs build --strict``: while the examples ran, or now."""
    shared = shared_dir(tmp_path_factory)
    with exclusive(shared):
        recorded = shared / "site.json"
        if recorded.exists():
            result = json.loads(recorded.read_text())
        else:
            result = finish_build(shared, start_build(shared))
    assert result["returncode"] == 0, f"mkdocs build --strict failed:\n{result['output']}"
    return Path(result["site"])


class Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name == "id" and value:
                self.ids.add(value)
            if value and ((tag == "a" and name == "href") or (tag == "img" and name == "src")
                          or (tag == "link" and name == "href")):
                self.links.append(value)


def test_site_builds_strictly_and_every_internal_link_resolves(site: Path) -> None:
    pages = {p: Links() for p in site.rglob("*.html")}
    for path, parser in pages.items():
        parser.feed(path.read_text())
    broken: list[str] = []
    for path, parser in pages.items():
        for link in parser.links:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc or link.startswith(("mailto:", "javascript:")):
                continue
            if not parts.path:
                target = path
            elif parts.path.startswith("/"):  # the 404 page links from the site's root
                target = (site / unquote(parts.path).lstrip("/")).resolve()
            else:
                target = (path.parent / unquote(parts.path)).resolve()
            if target.is_dir():
                target = target / "index.html"
            where = f"{path.relative_to(site)} -> {link}"
            if not target.exists():
                broken.append(f"{where}: no such file")
            elif (parts.fragment and target.suffix == ".html"
                  and unquote(parts.fragment) not in pages[target].ids):
                broken.append(f"{where}: no such anchor")
    assert not broken, "broken links in the built site:\n" + "\n".join(broken)
    assert (site / "reference" / "openapi.json").is_file()


def test_every_page_is_in_the_site(site: Path) -> None:
    sources = {p.relative_to(DOCS).with_suffix("") for p in DOCS.rglob("*.md")
               if "_ext" not in p.parts}
    for source in sources:
        built = site / source / "index.html" if source.name != "index" else (
            site / source.parent / "index.html")
        assert built.is_file(), f"docs/{source}.md was not built"


def test_the_api_reference_documents_every_public_name() -> None:
    directives = set()
    for page in (DOCS / "reference" / "api").glob("*.md"):
        directives |= set(re.findall(r"^::: (\S+)", page.read_text(), flags=re.M))
    missing = [name for name in dbscheduler.__all__ if f"dbscheduler.{name}" not in directives]
    assert not missing, f"add ::: dbscheduler.<name> to a page of docs/reference/api: {missing}"


@pytest.mark.parametrize("target", [Scheduler, Client, create_app, PrometheusMetrics])
def test_the_configuration_page_names_every_argument(target: Callable[..., object]) -> None:
    page = (DOCS / "reference" / "configuration.md").read_text()
    names = list(inspect.signature(target).parameters)
    missing = [n for n in names if f"`{n}`" not in page]
    assert not missing, f"docs/reference/configuration.md does not describe {missing}"

