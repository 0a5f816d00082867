"""One module per CLI verb. Each has `add_arguments(parser)` and `main(ns) -> exit code`; `fminfra.cli`
only parses arguments and dispatches here. New verbs get a module here and a line in
`fminfra.cli.COMMANDS`.

Exit codes, for every command: 0 success, 1 a check the command runs failed, 2 bad input (one
line per problem, `FILE: field.path: message`, never a traceback).
"""
