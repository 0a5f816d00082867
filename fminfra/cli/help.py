"""The help of the arguments several verbs share (each verb is a module of `fminfra.cli.verbs`)."""

ENV_HELP = "environment name (config/ENV.yaml) or config file"
CONFIG_HELP = "file path, or environment name for config/NAME.yaml"
PROFILE_HELP = "AWS profile (default: normal credential resolution)"
OUTDIR_HELP = "the synthesized cloud assembly (default cdk.out, from `make synth`)"
