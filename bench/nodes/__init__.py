"""One node process per scheduler under test; each speaks :mod:`bench.protocol` on stdin/stdout."""
