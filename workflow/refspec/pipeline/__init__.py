"""Workflow glue: what ``./run main`` and ``./run test`` run (``main``), the run's artifact list and
signing key the manifest and the seals need (``provenance_inputs``), the seal chain (``seal_chain``),
the offline bundle (``bundle``), a sealed archive run again (``reproduce``) and an engine's
qualification against its own reference (``engine_qualification``). Their command lines are in :mod:`refspec.commands`; the
development tools (``refspec lint``) are in :mod:`refspec.devtools`."""
