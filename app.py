#!/usr/bin/env python3
"""CDK app: load config(s) -> one Stage per environment -> policy packs -> synth.

`npx cdk synth -c config=PATH` synthesizes one environment from any config file; without it,
every file in config/ is synthesized.
"""

import sys

from fminfra.app.synth import main

if __name__ == "__main__":
    sys.exit(main())
