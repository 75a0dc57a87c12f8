"""Runnable examples of dbscheduler (see each module's docstring for how to run it)."""
