"""``python -m capjudge.cli``: the ``capjudge`` command."""

import sys

from capjudge.cli.app import main

sys.exit(main())
