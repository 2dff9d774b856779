"""The report's sections, one module per group: ``summary``, ``provenance`` (and the ledger),
``qualification`` (and the phase masks), ``timing`` (ratios, diagnostics, replication,
acceptance), ``numerical`` (replay, audit), ``prediction``, ``state_studies``, ``admission`` and
``claims``; ``vocabulary`` holds the words and orders they share. Each section function registers
its numbers in :class:`refspec_check.render.document.Numbers`."""
