"""``python -m evo`` runs the CLI."""

import sys

from evo.cli import main

sys.exit(main())
