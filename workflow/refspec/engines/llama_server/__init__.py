"""llama.cpp's ``llama-server`` (``kind: server``, ``anc/servers.md``): a stock or patched build of the
pinned source, a user's binary of any version, or a server already listening on loopback.

``spec.py``: an arm's ``server:`` settings and their checks; ``cli.py``: a binary's command line,
adapted to the options its ``--help`` lists; ``process.py``: its launcher; ``qualify.py``: ``refspec
qualify server`` (the server against its own micro-batch-1 reference).
"""

from ...core.engine_registry import Engine
from .spec import ServerSpec, check, reference_problems

ENGINE = Engine(
    kind="server",
    name="llama-server",
    folder="llama_server",
    start=".process:start_server",
    settings_key="server",
    settings=ServerSpec,
    check=check,
    reference_problems=reference_problems,
    qualify=".qualify:PRESET",
)
