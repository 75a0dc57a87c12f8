"""Integrations with frameworks: :mod:`dbscheduler.contrib.django`."""
