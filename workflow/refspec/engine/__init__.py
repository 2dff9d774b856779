"""The decoding engine: the speculative transaction (``transaction``), the loopback worker
(its engine ``worker_engine``, its HTTP side ``worker_http``; the driver's handle on its process
``worker_process``), the driver that starts fresh workers and times requests (``driver``),
black-box server arms (``server``) and in-process decoding (``decode``)."""
