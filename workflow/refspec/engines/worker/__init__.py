"""refspec's own worker (``kind: worker``, the default): the patched llama.cpp through refspec's
transaction engine, asked over loopback HTTP with a bearer secret (``anc/worker.md``).

``process.py``: the arm's process (:class:`refspec.engines.worker.process.WorkerProcess`) and its
launchers, for one arm and for several arms in one process (the paired design); ``engine.py``: what
the worker program runs (:class:`refspec.engines.worker.engine.WorkerEngine`); ``http.py``: its
protocol (``refspec worker``, :mod:`refspec.commands.worker`).
"""

from ...core.engine_registry import Engine

ENGINE = Engine(
    kind="worker",
    name="refspec's worker",
    folder="worker",
    start=".process:start_worker",
    start_paired=".process:start_paired_worker",
)
