"""Workflow glue: the ``main``/``test`` entry points (``main``), the commands the Snakemake
rules call to put a run's outputs together (``stages``), and the offline bundle
(``bundle``)."""
