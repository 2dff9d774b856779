"""The stock ``llama-server`` of an older ``llama-cpp-python`` release, for the opt-in test that qualifies
a server of another version against its own reference and refspec's R (``-m other_server``)."""

from __future__ import annotations

from refspec.native.build import SERVER_BUILD, BuildOptions, BuildResult, build_variant
from refspec.native.sdist import SdistPin

# an older release (2025-08-15, llama.cpp 4227c9be): the stock llama-server of another version,
# for qualifying a server against its own reference (build_other_server, tests -m other_server)
OLD_SERVER_SDIST = SdistPin(
    "0.3.16",
    "34ed0f9bd9431af045bb63d9324ae620ad0536653740e9bb163a2e1fcb973be6",
    "4227c9be4268ac844921b90f31595f81236bd317",
)


def build_other_server(
    pin: SdistPin = OLD_SERVER_SDIST,
    options: BuildOptions | None = None,
    *,
    jobs: int | None = None,
    quiet: bool = False,
) -> BuildResult:
    """Build (or find cached) the stock ``llama-server`` of another pinned ``llama-cpp-python``
    release (:data:`OLD_SERVER_SDIST` by default): the same flags and cache as :func:`build_server`
    (``$REFSPEC_CACHE/native/<key16>``, keyed by the sdist's pin and the flags), no patch applied.
    Flags an older CMake project does not know are reported by CMake as unused and change nothing."""
    return build_variant(SERVER_BUILD, options or BuildOptions(), "stock", jobs=jobs, quiet=quiet, pin=pin)
