import sys

from pytest_longctx.cli.main import main

sys.exit(main())
