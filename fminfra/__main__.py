import sys

from fminfra.cli import main

sys.exit(main())
