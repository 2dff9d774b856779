"""The decoding engine: the speculative transaction (``transaction``), KV state
(``kvstate``), the loopback worker (``worker``), the driver that starts fresh workers and
times requests (``driver``), black-box server arms (``server``) and in-process decoding
(``decode``)."""
