"""A failure's traceback is kept whole when short and cut from the outside when long: the
innermost frames and the exception line always stay."""

from __future__ import annotations

from dbscheduler._engine.execution import MAX_TRACEBACK_CHARS, bounded_traceback


def _raise_deep(depth: int) -> None:
    # Distinct lines per level, so Python does not fold them into "[Previous line repeated]".
    namespace: dict[str, object] = {}
    source = "def f0():\n    raise KeyError('innermost ' + 'ü' * 3)\n" + "".join(
        f"def f{i}():\n    x{i} = {i}\n    f{i - 1}()\n" for i in range(1, depth))
    exec(compile(source, "<generated>", "exec"), namespace)
    namespace[f"f{depth - 1}"]()  # type: ignore[operator]


def _caught(depth: int) -> BaseException:
    try:
        _raise_deep(depth)
    except KeyError as exc:
        return exc
    raise AssertionError("did not raise")


def test_a_short_traceback_is_kept_whole() -> None:
    text = bounded_traceback(_caught(3))
    assert text.startswith("Traceback (most recent call last):")
    assert "left out" not in text
    assert text.splitlines()[-1] == "KeyError: 'innermost üüü'"
    assert "in f2" in text and "in f0" in text


def test_a_long_traceback_keeps_the_innermost_frames_within_the_bound() -> None:
    exc = _caught(400)
    whole = bounded_traceback(exc, limit=10**9)
    assert len(whole) > MAX_TRACEBACK_CHARS
    text = bounded_traceback(exc)
    assert len(text) <= MAX_TRACEBACK_CHARS
    lines = text.splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert "characters of outer frames left out" in lines[1]
    assert lines[2].startswith('  File "<generated>"')  # starts at a frame, not mid-line
    assert lines[-1] == "KeyError: 'innermost üüü'" and "in f0" in text
    assert "in f399" not in text  # the outermost frames gave way
