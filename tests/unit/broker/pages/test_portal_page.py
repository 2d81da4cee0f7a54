"""The portal page's pure parts: the language an Accept-Language header gets (a table and
properties), every language having every string, the page's templates filled in one pass with
values escaped, and JSON that cannot leave its script element."""

from __future__ import annotations

import html
import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hostpool_operator.broker.pages import i18n
from hostpool_operator.broker.pages.portal import PACKAGE, STATIC
from hostpool_operator.broker.render import read, render, script_json

CHOICES = [
    (None, "en"),
    ("", "en"),
    ("sv", "sv"),
    ("sv-SE,sv;q=0.9,en-US;q=0.8,en;q=0.7", "sv"),
    ("ko-KR,ko;q=0.9", "ko"),
    ("KO", "ko"),
    ("zh-CN", "zh"),
    ("zh-TW,zh-Hant;q=0.9", "zh"),
    ("tr-TR", "tr"),
    ("es-419,es;q=0.9", "es"),
    ("de-DE,de;q=0.9", "en"),  # not offered
    ("de,es;q=0.5", "es"),  # the first offered one
    ("en;q=0.5, ko;q=0.6", "ko"),  # by q, not by order
    ("sv;q=0.8, ko;q=0.8", "sv"),  # a tie: the earlier
    ("tr;q=0, en", "en"),
    ("tr;q=0, tr-TR", "en"),  # refused by name, not taken back by a region
    ("*", "en"),
    ("*;q=0.5, es;q=0.6", "es"),
    ("fr, *;q=0.1", "en"),
    ("ko;q=2", "en"),  # not a q-value: the range is left out
    ("ko;q=0.0001", "en"),
    ("ko;q=0.001", "ko"),
    ("ko;q=x, sv", "sv"),
    ("sv ; q=0.5 , ko ; q=0.4", "sv"),
    ("../../etc, ko", "ko"),
    (",,,;;;,ko", "ko"),
    ("x" * 5000 + ",ko", "en"),  # past the bounds read
]


@pytest.mark.parametrize(("header", "language"), CHOICES)
def test_language_table(header: str | None, language: str) -> None:
    assert i18n.choose(header) == language


@given(st.text(max_size=200))
def test_any_header_gets_an_offered_language(header: str) -> None:
    assert i18n.choose(header) in i18n.LANGUAGES


@given(
    st.sampled_from(i18n.LANGUAGES),
    st.lists(st.sampled_from(["de", "fr", "ja", "x-klingon", "pt-BR"]), max_size=4),
    st.sampled_from(["", "-XX", "-Latn-XX"]),
)
def test_the_only_offered_language_asked_for_is_served(
    language: str, others: list[str], region: str
) -> None:
    header = ", ".join([*others, f"{language}{region};q=0.3"])
    assert i18n.choose(header) == language


@given(st.permutations(list(i18n.LANGUAGES)), st.permutations([1, 2, 3, 4, 5, 6]))
def test_the_highest_q_wins_whatever_the_order(order: list[str], tenths: list[int]) -> None:
    weights = dict(zip(order, tenths, strict=True))
    header = ", ".join(f"{language};q=0.{weights[language]}" for language in order)
    assert i18n.choose(header) == max(weights, key=lambda k: weights[k])


def test_every_language_has_every_string_with_the_same_places() -> None:
    english = i18n.STRINGS["en"]
    for language in i18n.LANGUAGES:
        strings = i18n.strings(language)
        assert set(strings) == set(english), language
        for key, value in strings.items():
            places = set(re.findall(r"\{(\w+)\}", value))
            assert places == set(re.findall(r"\{(\w+)\}", english[key])), (language, key)
            assert value.strip(), (language, key)
    # The languages differ where it matters to a reader.
    assert len({i18n.strings(lang)["connect"] for lang in i18n.LANGUAGES}) == 6


def test_every_place_in_the_templates_has_a_value() -> None:
    keys = set(i18n.STRINGS["en"]) | {"lang", "csrf", "pools_json", "strings_json"}
    for name in ("page.html", "signin.html"):
        places = set(re.findall(r"\{([a-z_]+)\}", read(PACKAGE, "static", name)))
        assert places <= keys, (name, places - keys)
    assert set(STATIC) == {"page.js", "page.css"}


def test_render_escapes_values_and_fills_in_one_pass() -> None:
    page = render(
        '<p title="{a}">{b}</p><script type="application/json">{c}</script>{d}',
        {"a": '"><script>x</script>', "b": "{c} & {a}"},
        {"c": script_json({"x": "</script><!--"})},
    )
    assert "<script>x</script>" not in page
    assert html.escape('"><script>x</script>', quote=True) in page
    assert ">{c} &amp; {a}<" in page  # a value is never read as a place
    assert page.endswith("{d}")  # a place without a value stays
    assert page.count("</script>") == 1


@given(st.recursive(st.text(), lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner)))
def test_script_json_round_trips_and_never_closes_its_element(value: object) -> None:
    text = script_json(value)
    assert not set(text) & set("<>&")
    assert json.loads(text) == value
