"""Lambda code of `OnDemandCapacityReservation` inside a placement group (a CloudFormation custom
resource handler); shipped as package data and as the Lambda's asset. It imports nothing from fminfra."""
