"""`python -m fp8lab ...`: the `fp8lab` command (`fp8lab.cli`) where the script is not on PATH."""

import sys

from fp8lab.cli import main

sys.exit(main())
