"""The command layer.

The only layer that parses arguments, loads the configuration and the native
library, prints to the terminal and maps results to exit codes. One module per
command named in :data:`refspec.cli.SUBCOMMANDS`, each defining
``add_arguments(parser) -> None`` and ``run(args) -> int``.
"""
