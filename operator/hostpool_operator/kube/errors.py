"""What a failed API request raises: an answer that was not 2xx, or no answer at all."""

from __future__ import annotations


class ApiTransportError(ConnectionError):
    """The request got no answer (connection refused, reset or dropped, or timed out): it
    may or may not have been applied. Callers that must know re-read the object."""


class NotLeaderError(ApiTransportError):
    """A write this instance refused to send: it does not hold the leader Lease, or cannot
    prove it still does (see ``KubeClient.write_gate``). Nothing reached the API server."""


class ApiError(Exception):
    """A non-2xx answer from the API server."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def not_found(self) -> bool:
        return self.status == 404
