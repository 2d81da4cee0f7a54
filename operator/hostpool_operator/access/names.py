"""The name of the request a broker creates for a user in a pool.

One name per (namespace, pool, user): the API server refuses a second object of that name,
so concurrent or retried connects, and broker replicas racing each other, can never create
two live requests for one user in one pool (the loser's create gets 409 and reuses the
winner's request)."""

from __future__ import annotations

import hashlib
import re

#: A Kubernetes object name (DNS-1123 subdomain), the form of namespaces and pools too.
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_NOT_NAME = re.compile(r"[^a-z0-9]+")
#: Characters of the user name kept in the request name, to make it readable.
_USER_PREFIX = 24


def is_object_name(text: str) -> bool:
    """Whether ``text`` can be the name of a hostpool.io object (at most 253 characters)."""
    return len(text) <= 253 and bool(_SUBDOMAIN.match(text))


def is_namespace(text: str) -> bool:
    """Whether ``text`` can be a namespace's name (a DNS-1123 label)."""
    return len(text) <= 63 and bool(_LABEL.match(text))


def request_name(namespace: str, pool: str, user: str) -> str:
    """``<readable part of the user>-<hash of namespace, pool and user>``: the hash makes it
    unique (the user name is hashed exactly, so "Alice" and "alice" differ), the prefix lets
    a person recognise it in ``kubectl get sr``."""
    digest = hashlib.sha256(f"{namespace}\0{pool}\0{user}".encode()).hexdigest()[:20]
    prefix = _NOT_NAME.sub("-", user.lower())[:_USER_PREFIX].strip("-")
    return f"{prefix}-{digest}" if prefix else f"u-{digest}"
