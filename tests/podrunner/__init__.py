"""The pod runner for the test API server (runner.py), with its pure decisions (decide.py)."""

from tests.podrunner.runner import PodRunner

__all__ = ["PodRunner"]
