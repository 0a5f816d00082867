"""What `fminfra accept` runs on a HyperPod Slurm login node: submit the plan's jobs with `sbatch`,
wait for them (`sacct`), cancel what outlives the timeout, check the results, print the table and
write the JSON report (`runner`; `checks` and `results` the checks and the parsers).

Standard library only, for Python 3.10 (`PYTHON_VERSION`, the python3 of the HyperPod Slurm AMI:
docs/facts/hyperpod.md#hyperpod-slurm-ami-python), and its imports inside the package are
relative: `fminfra accept-remote` ships this folder with each run (as `fminfra_accept_node`, beside
the plan) and runs it with the node's own python3, so the node needs nothing installed and runs the
code of the version CI deploys; `fminfra accept` on the login node runs the same code in process.
tests/ops/accept/node/test_portable.py holds the package to this."""

# The grammar, standard library and builtins this package may use (tests/ops/accept/node/test_portable.py).
PYTHON_VERSION = (3, 10)
