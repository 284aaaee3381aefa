"""The ``longctx`` command line."""
from pytest_longctx.cli.main import main

__all__ = ["main"]
