"""The campaigns: the timing and qualification campaigns of the paper (``refspec campaign NAME``,
:mod:`refspec.commands.campaign`).

One module per campaign (``confirmation``, ``implementation``, ``replication``, ``width``,
``phase_mask``, ``prediction``, ``servers``) defines its panels, arms, schedule and analysis.
:mod:`.definitions` reads the campaign definitions, :mod:`.context` prepares a campaign (the
plan to freeze), :mod:`.execution` runs and analyses it, :mod:`.runner` runs its sessions,
:mod:`.scheduler` draws the schedules and :mod:`.derived` computes the derived tables.
"""
