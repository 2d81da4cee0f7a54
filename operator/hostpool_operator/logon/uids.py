"""The uid an identity gets on every host: from a claim of the person's token where the
organisation keeps one (``--uid-claim uidNumber``), else the broker's own allocation,
recorded in the cluster so that every replica and every restart gives the same answer, and
never two users the same uid. Pure: what is recorded is passed in."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Set
from typing import Any, Final

from .credential import MAX_UID, MIN_UID

#: Where allocations start and end: above the uids a host image's own accounts use, and
#: below the range a claim from a directory usually names (both are checked, not assumed).
FIRST_ALLOCATED: Final = 20_000
LAST_ALLOCATED: Final = 59_999


class UidError(ValueError):
    """No uid can be given (the message says why, for the caller's answer)."""


def from_claim(claims: Mapping[str, Any], name: str) -> int | None:
    """The uid a token's claim names (None: the token has no such claim); a value that is
    not a person's uid is an error, never a guess."""
    if name not in claims:
        return None
    value = claims[name]
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise UidError(f"the token's {name} claim is not a number")
    text = str(value).strip()
    if not text.isdigit() or len(text) > 10:
        raise UidError(f"the token's {name} claim is not a number")
    uid = int(text)
    if not MIN_UID <= uid <= MAX_UID:
        raise UidError(f"the token's {name} claim ({uid}) is not in {MIN_UID}..{MAX_UID}")
    return uid


def record_name(user: str) -> str:
    """The name of the object recording a user's uid (a DNS label, whatever the user name)."""
    return "uid-user-" + hashlib.sha256(user.encode()).hexdigest()[:40]


def uid_record_name(uid: int) -> str:
    """The name of the object that holds ``uid`` for one user (its creation is the claim)."""
    return f"uid-{uid}"


def first_try(user: str) -> int:
    """Where the search for a user's uid starts: spread by the name, so that users
    allocated at once rarely try the same uid."""
    span = LAST_ALLOCATED - FIRST_ALLOCATED + 1
    return FIRST_ALLOCATED + int(hashlib.sha256(user.encode()).hexdigest()[:12], 16) % span


def candidates(user: str, taken: Set[int], limit: int = 64) -> list[int]:
    """Up to ``limit`` uids to try for ``user``, in order, none of them ``taken``."""
    span = LAST_ALLOCATED - FIRST_ALLOCATED + 1
    start = first_try(user) - FIRST_ALLOCATED
    found: list[int] = []
    for step in range(span):
        uid = FIRST_ALLOCATED + (start + step) % span
        if uid not in taken:
            found.append(uid)
            if len(found) == limit:
                break
    if not found:
        raise UidError("every uid the broker allocates is taken")
    return found
