"""MkDocs hooks: pages generated from the code at build time, so they cannot go stale.

* ``reference/rest.md``: the marker ``<!-- openapi -->`` becomes the REST reference, rendered
  from the OpenAPI document of ``dbscheduler.web.create_app()``; the document itself is
  published next to it as ``reference/openapi.json``.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

MARKER = "<!-- openapi -->"
METHODS = ("get", "put", "post", "delete", "patch")
COMMON_ERRORS = {"401", "403", "422", "500", "503"}


_document: dict[str, Any] | None = None


def openapi() -> dict[str, Any]:
    """The REST API's OpenAPI document, as the web app serves it at ``/api/openapi.json``."""
    from dbscheduler import Client
    from dbscheduler.web import create_app

    # The app needs a database to stand on; building its document never connects to it.
    with tempfile.TemporaryDirectory() as tmp, Client(f"sqlite:///{Path(tmp) / 'x.db'}") as c:
        document: dict[str, Any] = create_app(c).openapi()
    return document


def on_config(config: Any) -> Any:
    global _document
    _document = openapi()  # once per build, also on every rebuild of `mkdocs serve`
    return config


def on_files(files: Files, config: Any) -> Files:
    assert _document is not None
    files.append(File.generated(config, "reference/openapi.json",
                                content=json.dumps(_document, indent=2) + "\n"))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    if MARKER not in markdown or _document is None:
        return markdown
    return markdown.replace(MARKER, render(_document))


# -- rendering -----------------------------------------------------------------------------


def render(doc: dict[str, Any]) -> str:
    """Markdown for every operation of ``doc``, then every schema it uses."""
    out: list[str] = ["## Endpoints", ""]
    for path, item in doc["paths"].items():
        for method in METHODS:
            if method in item:
                out += _operation(method, path, item[method])
    out += ["## Schemas", ""]
    for name, schema in doc.get("components", {}).get("schemas", {}).items():
        out += _schema(name, schema)
    return "\n".join(out)


def _operation(method: str, path: str, op: dict[str, Any]) -> list[str]:
    out = [f"### {method.upper()} `{path}`", "", f"**{op.get('summary', '')}.** "
           f"{op.get('description', '')}", ""]
    params = op.get("parameters", [])
    if params:
        out += ["| parameter | in | type | required | meaning |", "| --- | --- | --- | --- | --- |"]
        for p in params:
            schema = p.get("schema", {})
            default = f" (default `{schema['default']}`)" if "default" in schema else ""
            out.append(f"| `{p['name']}` | {p['in']} | {_type(schema)} | "
                       f"{'yes' if p.get('required') else 'no'} | "
                       f"{_cell(p.get('description', ''))}{default} |")
        out.append("")
    body = op.get("requestBody")
    if body:
        schema = body["content"]["application/json"]["schema"]
        out += [f"Request body (JSON): {_type(schema)}", ""]
    out += ["| status | meaning | body |", "| --- | --- | --- |"]
    common: list[str] = []
    for status, response in op.get("responses", {}).items():
        if status in COMMON_ERRORS:
            common.append(status)
            continue
        content = response.get("content", {}).get("application/json", {})
        shown = _type(content["schema"]) if "schema" in content else "–"
        meaning = "success" if status.startswith("2") else _cell(response["description"])
        out.append(f"| {status} | {meaning} | {shown} |")
    if common:
        out.append(f"| {', '.join(sorted(common))} | [the common errors](#errors) | "
                   f"[`ApiError`](#apierror) |")
    out.append("")
    return out


def _schema(name: str, schema: dict[str, Any]) -> list[str]:
    out = [f"### {name}", ""]
    if schema.get("description"):
        out += [_prose(schema["description"]), ""]
    props = schema.get("properties", {})
    if props:
        required = set(schema.get("required", []))
        out += ["| field | type | required | meaning |", "| --- | --- | --- | --- |"]
        for field, spec in props.items():
            out.append(f"| `{field}` | {_type(spec)} | {'yes' if field in required else 'no'} "
                       f"| {_cell(spec.get('description', ''))} |")
        out.append("")
    return out


def _type(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[`{name}`](#{name.lower()})"
    if "anyOf" in schema:
        return " or ".join(_type(s) for s in schema["anyOf"])
    if "enum" in schema:
        return " \\| ".join(f"`{v!s}`" for v in schema["enum"])
    kind = schema.get("type")
    if kind == "array":
        return f"array of {_type(schema.get('items', {}))}"
    if kind == "object" and "additionalProperties" in schema:
        return "object"
    if kind is None:
        return "any JSON"
    fmt = schema.get("format")
    return f"{kind} ({fmt})" if fmt else str(kind)


def _prose(text: str) -> str:
    return text.replace("``", "`")


def _cell(text: str) -> str:
    return _prose(text).replace("|", "\\|").replace("\n", " ")
