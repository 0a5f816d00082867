"""Contract checks: synthesized templates against data AWS publishes in packages from PyPI
(botocore's service models, moto's AWS managed-policy list, an IAM actions database)."""
