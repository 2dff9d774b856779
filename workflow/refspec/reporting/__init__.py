"""The report's files: the pipeline writes what the renderer makes of a results folder (``render``).

The renderer itself, standard library only, is the checker's: :mod:`refspec_check.render` (in the
repository's report/, beside ``report/check.py``, which renders every archive again with it). The
``refspec report`` command is :mod:`refspec.commands.report`."""
