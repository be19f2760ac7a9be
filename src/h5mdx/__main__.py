"""``python -m h5mdx`` runs the command line."""

import sys

from h5mdx.cli import main

sys.exit(main())
