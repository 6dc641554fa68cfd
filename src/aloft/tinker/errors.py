"""Errors the Tinker server turns into the SDK's own: a bad request is HTTP 400 at submission
(``tinker.BadRequestError``) or, once accepted, a failed future with category ``user``
(``tinker.RequestFailedError``); an unknown session, model or sampler is HTTP 404
(``tinker.NotFoundError``)."""

from __future__ import annotations


class TinkerUserError(ValueError):
    """What the request asks cannot be served (an unknown model or loss, a sequence over the limit,
    a malformed body); the message names the problem and the fix."""


class TinkerNotFoundError(LookupError):
    """The request names a session, training client, sampler or checkpoint this server does not hold."""
