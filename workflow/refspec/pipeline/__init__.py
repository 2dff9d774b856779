"""Workflow glue: what ``./run main`` and ``./run test`` run (``main``), the steps the Snakemake
rules call to put a run's outputs together (``stages``), the offline bundle (``bundle``) and the
code checks of ``refspec lint`` (``lint``) with the package's import contract (``contract``).
Their command lines are in :mod:`refspec.commands`."""
