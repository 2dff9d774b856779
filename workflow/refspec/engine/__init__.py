"""What every engine shares: the speculative transaction (``transaction``), an arm's process
interface (``process``) and its launcher through the engine registry (``launcher``), the server
interface every engine but refspec's worker speaks (``server``), the driver that starts fresh
processes and times requests (``driver``) and in-process decoding (``decode``). The engines
themselves are in :mod:`refspec.engines`, one folder each."""
