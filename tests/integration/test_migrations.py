"""Migrations, ``ddl/*.sql`` and the table definition are one shape on every real database.

The checks that need no database (offline SQL, the shipped scripts, the compiled definition)
are in ``tests/unit/test_migrations.py``."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from dbscheduler.cli import cli
from dbscheduler.migrate import HEAD, upgrade, version_table_for
from dbscheduler.table import COLUMNS, ITEM_COLUMNS

ROOT = Path(__file__).resolve().parents[2]


def statements(sql: str) -> list[str]:
    """The statements of an offline script, without comments and transaction control."""
    body = "\n".join(line for line in sql.splitlines() if not line.startswith("--"))
    parts = [p.strip() for p in re.split(r";\s*\n|^GO\s*$", body, flags=re.M)]
    return [p.rstrip(";") for p in parts if p and p.upper() not in ("BEGIN", "COMMIT", "GO")]


def _shape(engine: sa.Engine, table: str, schema: str | None = None) -> dict[str, Any]:
    insp = sa.inspect(engine)
    cols = {
        c["name"]: (str(c["type"].compile(dialect=engine.dialect)).lower(), c["nullable"])
        for c in insp.get_columns(table, schema=schema)
    }
    indexes = sorted(
        (tuple(i["column_names"]), bool(i["unique"])) for i in insp.get_indexes(table, schema)
    )
    uniques = sorted(tuple(u["column_names"]) for u in insp.get_unique_constraints(table, schema))
    return {"columns": cols, "indexes": [i for i in indexes if i[0] != ("queue_name",)],
            "unique": uniques or [("queue_name",)]}


def test_migrated_table_has_every_column(migrated: tuple[str, str]) -> None:
    url, table = migrated
    engine = sa.create_engine(url)
    try:
        shape = _shape(engine, table)
        assert list(shape["columns"]) == list(COLUMNS)
        assert ("queue_name",) in shape["unique"]
        assert (("next_process_at",), False) in shape["indexes"]
        assert list(_shape(engine, f"{table}_items")["columns"]) == list(ITEM_COLUMNS)
        with engine.connect() as conn:
            version = conn.execute(sa.text(f"SELECT version_num FROM {version_table_for(table)}"))
            assert version.scalar_one() == HEAD
    finally:
        engine.dispose()


def test_migrate_twice_is_a_no_op(migrated: tuple[str, str]) -> None:
    url, table = migrated
    engine = sa.create_engine(url)
    upgrade(engine, table)
    engine.dispose()


def test_ddl_file_applies_and_equals_the_migrated_table(
    migrated: tuple[str, str], backend: str, tmp_path: Path
) -> None:
    url, table = migrated
    engine = sa.create_engine(url)
    sql = (ROOT / "ddl" / f"{'mysql' if backend == 'mysql' else backend}.sql").read_text()
    sandbox = f"ddl_{uuid.uuid4().hex[:8]}"
    try:
        if backend == "sqlite":
            other = sa.create_engine(f"sqlite:///{tmp_path / 'ddl.sqlite3'}")
            schema = None
        else:
            # Its own connection: SET search_path / USE must not leak into `engine`'s pool.
            other, schema = sa.create_engine(url, poolclass=sa.pool.NullPool), sandbox
            with engine.begin() as conn:
                conn.execute(sa.text(f"CREATE {'SCHEMA' if backend == 'postgresql' else 'DATABASE'}"
                                     f" {sandbox}"))
        with other.begin() as conn:
            if backend == "postgresql":
                conn.execute(sa.text(f"SET search_path TO {sandbox}"))
            elif backend == "mysql":
                conn.execute(sa.text(f"USE {sandbox}"))
            for stmt in statements(sql):
                conn.exec_driver_sql(stmt)
        applied = _shape(other, "scheduled_tasks", schema)
        assert applied == _shape(engine, table)
        assert _shape(other, "scheduled_tasks_items", schema) == _shape(engine, f"{table}_items")
    finally:
        if backend != "sqlite":
            with engine.begin() as conn:
                kind = "SCHEMA" if backend == "postgresql" else "DATABASE"
                cascade = " CASCADE" if backend == "postgresql" else ""
                conn.execute(sa.text(f"DROP {kind} IF EXISTS {sandbox}{cascade}"))
        engine.dispose()


def _guide_alembic_blocks() -> list[tuple[str, str]]:
    """The fenced blocks of the guide's set-up and autogenerate sections
    (docs/guides/alembic.md, "Set-up, from scratch" up to "One way per table"), in order."""
    guide = (ROOT / "docs" / "guides" / "alembic.md").read_text()
    section = guide.split("## Set-up, from scratch", 1)[1].split("\n## One way per table", 1)[0]
    return re.findall(r"```(\w+)\n(.*?)```", section, re.S)


def _installed_layout(site: Path) -> None:
    """dbscheduler as a wheel installs it: the migrations inside it, as ``_migrations``
    (pyproject's force-include), real files rather than the checkout's symlink."""
    shutil.copytree(ROOT / "dbscheduler", site / "dbscheduler",
                    ignore=shutil.ignore_patterns("_migrations"))
    shutil.copytree(ROOT / "migrations", site / "dbscheduler" / "_migrations")


@pytest.mark.parametrize("install", ["wheel", "editable"])
def test_a_users_own_alembic_environment_as_the_guide_says(tmp_path: Path, install: str) -> None:
    """The guide's steps (docs/guides/alembic.md), literally, from ``alembic init`` of the
    installed Alembic: our branch, a first revision of the user's own, and an autogenerate
    that leaves our tables — with dbscheduler laid out as a wheel installs it, and as the
    checkout an editable install (``pip install -e .``) imports."""
    app = tmp_path / "app"
    if install == "wheel":
        site = tmp_path / "site"
        _installed_layout(site)
    else:
        site = ROOT
    app.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site)}
    alembic = str(Path(sys.executable).parent / "alembic")

    def run(command: str) -> str:
        argv = shlex.split(command)
        assert argv[0] == "alembic", command
        proc = subprocess.run([alembic, *argv[1:]], cwd=app, env=env, capture_output=True,
                              text=True, timeout=60)
        assert proc.returncode == 0, (command, proc.stdout, proc.stderr)
        return proc.stdout + proc.stderr

    blocks = _guide_alembic_blocks()
    kinds = [kind for kind, _ in blocks]
    assert kinds == ["sh", "ini", "sh", "python"], kinds
    (_, init), (_, ini_lines), (_, commands), (_, env_snippet) = blocks
    versions = app / "alembic" / "versions"
    ours = site / "dbscheduler" / "_migrations" / "versions"
    shipped = sorted(p.name for p in ours.glob("*.py"))

    for command in init.strip().splitlines():
        run(command)
    ini = app / "alembic.ini"
    text = ini.read_text()
    assert text.count("\npath_separator = os\n") == 1  # what the guide says to replace
    text = text.replace("\npath_separator = os\n", "\n" + ini_lines)
    text = re.sub(r"(?m)^sqlalchemy\.url = .*$", f"sqlalchemy.url = sqlite:///{app / 'app.db'}",
                  text)
    ini.write_text(text)

    for command in commands.strip().splitlines():
        run(command)
        if "revision" in command:
            (mine,) = versions.glob("*.py")  # the user's directory, not the package's
            source = mine.read_text()
            assert "down_revision: Union[str, Sequence[str], None] = None" in source
            mine.write_text(source.replace(
                '    """Upgrade schema."""\n    pass',
                '    """Upgrade schema."""\n'
                '    op.create_table("users", sa.Column("id", sa.Integer, primary_key=True))',
            ))
    assert sorted(p.name for p in ours.glob("*.py")) == shipped
    heads = run("alembic heads")
    assert f"{HEAD} (dbscheduler) (head)" in heads, heads
    # `dbscheduler migrate` on the table the user's Alembic made says so, instead of failing
    # on CREATE TABLE.
    migrated = CliRunner().invoke(cli, ["migrate", "--url", f"sqlite:///{app / 'app.db'}"])
    assert migrated.exit_code == 1, migrated.output
    assert "is managed by your own Alembic" in migrated.output, migrated.output
    assert f"alembic_version records {HEAD}" in migrated.output, migrated.output
    engine = sa.create_engine(f"sqlite:///{app / 'app.db'}")
    try:
        assert set(sa.inspect(engine).get_table_names()) == {
            "alembic_version", "scheduled_tasks", "scheduled_tasks_groups",
            "scheduled_tasks_items", "scheduled_tasks_nodes", "scheduled_tasks_runs", "users"}
        with engine.connect() as conn:
            heads = set(conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalars())
        assert HEAD in heads and len(heads) == 2
    finally:
        engine.dispose()

    if install == "editable":
        return  # the rest does not depend on where the package lies: once is enough

    # --autogenerate against the user's metadata: first as alembic init wrote env.py (it
    # proposes to drop our table), then with the guide's include_object.
    (app / "models.py").write_text(
        "import sqlalchemy as sa\n\nmetadata = sa.MetaData()\n"
        'users = sa.Table("users", metadata, sa.Column("id", sa.Integer, primary_key=True))\n'
    )
    env_py = app / "alembic" / "env.py"
    source = env_py.read_text().replace("target_metadata = None",
                                        "from models import metadata as target_metadata")
    env_py.write_text(source)
    autogenerate = 'alembic revision --autogenerate -m "probe" --head app@head'
    run(autogenerate)
    (probe,) = [p for p in versions.glob("*probe.py")]
    assert "op.drop_table('scheduled_tasks')" in probe.read_text()
    assert "op.drop_table('scheduled_tasks_runs')" in probe.read_text()
    probe.unlink()

    assert source.count("target_metadata=target_metadata") == 2
    source = source.replace("target_metadata=target_metadata",
                            "target_metadata=target_metadata, include_object=include_object")
    source = source.replace("config = context.config\n",
                            "config = context.config\n\n" + env_snippet, 1)
    env_py.write_text(source)
    run(autogenerate)
    (probe,) = [p for p in versions.glob("*probe.py")]
    body = probe.read_text()
    assert "op." not in body.split("def upgrade", 1)[1], body  # nothing to do, up or down
