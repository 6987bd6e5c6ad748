"""`python -m harness ...`: the same as the `harness` console script (see harness/cli/)."""

import sys

from harness.cli import main

sys.exit(main())
