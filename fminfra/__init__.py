"""fminfra: AWS CDK constructs and stacks for foundation-model training and serving platforms."""

__version__ = "0.1.0"
