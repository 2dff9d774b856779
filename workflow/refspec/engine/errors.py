"""The errors of an arm's process as the driver sees them: start, HTTP answer, transport, validation."""

from __future__ import annotations

from ..core.errors import RefspecError


class ProcessStartError(RefspecError):
    """An arm's process (a worker or another engine's) could not be started as expected."""


class RequestError(RefspecError):
    """The worker answered a request with an HTTP error."""

    def __init__(self, status: int, message: str):
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message


class TransportError(RefspecError):
    """No complete HTTP answer: connection refused or reset, timeout."""


class InvalidResponse(RefspecError):
    """An HTTP 200 answer that does not pass validation."""


class SequenceGap(InvalidResponse):
    """The worker's ``request_index`` did not advance by exactly one since the driver's last completion.

    The worker counts every completion it serves; a gap means it served requests the
    driver did not send (between or during timed ones), so the block's timings are not
    trusted: :func:`refspec.engine.driver.run_block` fails the block.
    """
