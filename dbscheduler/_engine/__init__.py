"""The engine's internals: polling, executing, finishing, heartbeats, isolation, timeouts,
wake-ups, start-up, the clock, notices, fault points, planning and handlers.

Nothing here is public: the public API is what the package root and its public modules export
(``docs/reference/api``). This package imports nothing on purpose, so that importing one of its
modules never drags in the others (``tests/unit/test_import_graph.py``).
"""
