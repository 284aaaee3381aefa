"""The declared options: every option of the plugin and of the ``longctx`` command, every
``KEY=VALUE`` key inside one, and the kinds of value they take (``table``, ``backend_keys``,
``keys``, ``values``), from which the front ends' parsers and ``--help`` are made (``fronts``), and
docs/options.md's tables (cli/options_docs.py). Light: importing it loads nothing heavy, as the plugin
needs."""
