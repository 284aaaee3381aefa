"""pytest-longctx: a regression gate for model compression on long-context agent behaviour."""

__version__ = "0.1.0"
