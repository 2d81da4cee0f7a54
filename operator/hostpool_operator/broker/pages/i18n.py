"""The portal page's languages: which one a browser's ``Accept-Language`` asks for, and the
page's strings in each (English, Swedish, Turkish, Spanish, Korean and Chinese; one JSON file
each in ``languages/``, read once at import).

A language is chosen by RFC 9110's rules, simplified to what browsers send:
each range with its q-value (absent: 1; 0: not acceptable), the highest q wins, ties go to
the earlier range; a range matches a language by its primary subtag (``sv-SE`` and ``sv``
are Swedish; ``zh-TW`` gets the Simplified Chinese strings, the only Chinese here); ``*``
stands for English. Nothing acceptable, or a header that cannot be read: English."""

from __future__ import annotations

import json
import re
from importlib import resources
from typing import Final

DEFAULT: Final = "en"
#: Ranges read from one header (browsers send fewer than ten).
MAX_RANGES: Final = 32
MAX_HEADER: Final = 4096
_RANGE = re.compile(r"^(\*|[A-Za-z]{1,8}(?:-[A-Za-z0-9]{1,8})*)$")
_QVALUE = re.compile(r"^(?:0(?:\.[0-9]{0,3})?|1(?:\.0{0,3})?)$")

#: The languages offered, each with its strings in ``languages/LANG.json`` (``{name}`` marks a
#: value the page puts in).
LANGUAGES: Final = ("en", "sv", "tr", "es", "ko", "zh")


def _load(language: str) -> dict[str, str]:
    path = resources.files("hostpool_operator.broker.pages") / "languages" / f"{language}.json"
    strings = json.loads(path.read_text(encoding="utf-8"))
    return {str(key): str(value) for key, value in strings.items()}


#: The strings of each language, read once.
STRINGS: Final[dict[str, dict[str, str]]] = {language: _load(language) for language in LANGUAGES}


def _ranges(header: str) -> list[tuple[str, float]]:
    """(range, q) of each readable item of the header, in order; unreadable items left out."""
    out: list[tuple[str, float]] = []
    for item in header[:MAX_HEADER].split(",")[:MAX_RANGES]:
        tag, *params = (part.strip() for part in item.split(";"))
        if not _RANGE.fullmatch(tag):
            continue
        q = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                value = value.strip()
                q = float(value) if _QVALUE.fullmatch(value) else -1.0
        if q >= 0:
            out.append((tag.lower(), q))
    return out


def _language(tag: str) -> str | None:
    if tag == "*":
        return DEFAULT
    primary = tag.split("-", 1)[0]
    return primary if primary in STRINGS else None


def choose(accept_language: str | None) -> str:
    """The language (one of :data:`LANGUAGES`) to serve for an ``Accept-Language`` header."""
    ranges = [(tag, q, _language(tag)) for tag, q in _ranges(accept_language or "")]
    # q=0 is "not this one"; only a range naming the language itself refuses it (a
    # sv-FI;q=0 does not refuse Swedish altogether).
    refused = {language for tag, q, language in ranges if q == 0 and tag == language}
    best, best_q = DEFAULT, 0.0
    for _, q, language in ranges:
        if language is not None and language not in refused and q > best_q:
            best, best_q = language, q
    return best


def strings(language: str) -> dict[str, str]:
    """The page's strings in ``language`` (English for one not offered)."""
    return STRINGS.get(language, STRINGS[DEFAULT])
