import sys

from fminfra.cli.main import main

sys.exit(main())
