"""`python3 -m fminfra_accept_node PLAN.json`: the shipped copy of this package, run on the login node."""

import sys

from .runner import main

sys.exit(main(sys.argv[1:]))
