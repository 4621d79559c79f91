"""Who may see the status page. Pure.

The page shows invariant names, owners and sample rows (masked, but still data), so it is
served openly only on a loopback listener. With `http.page_token` set it is asked for on
every page request, wherever the listener is bound: as `Authorization: Bearer <token>`
(curl, a proxy) or as the password of basic auth (a browser's own prompt; any user name).
Bound wider without a token, the page is refused rather than served to the network; the
probes and /metrics are unaffected.
"""

from __future__ import annotations

import base64
import binascii
import hmac
from dataclasses import dataclass, field
from typing import Literal

MAX_AUTHORIZATION = 1024  # a bearer token or user:password, not a payload

Verdict = Literal["allowed", "ask", "refused"]


@dataclass(frozen=True)
class Access:
    local: bool  # the listener is bound to a loopback address
    token: str | None = field(repr=False)  # a secret: never in a repr

    def verdict(self, authorization: str | None) -> Verdict:
        if self.token is None:
            return "allowed" if self.local else "refused"
        return "allowed" if presented(authorization, self.token) else "ask"


def presented(authorization: str | None, token: str) -> bool:
    """Whether the Authorization header carries `token`, compared in constant time."""
    if not authorization or len(authorization) > MAX_AUTHORIZATION:
        return False
    scheme, _, credentials = authorization.strip().partition(" ")
    credentials = credentials.strip()
    if scheme.lower() == "bearer":
        offered = credentials.encode()
    elif scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(credentials, validate=True)
        except (binascii.Error, ValueError):
            return False
        offered = decoded.partition(b":")[2]
    else:
        return False
    return hmac.compare_digest(offered, token.encode())


REFUSED = (
    "The status page is not served on a non-loopback listener without a token: set "
    "http.page_token (e.g. ${INVMON_PAGE_TOKEN}), or bind http.listen to 127.0.0.1."
)
