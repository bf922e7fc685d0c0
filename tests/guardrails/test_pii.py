"""Personal data found and masked in text: each kind in a sentence, the look-alikes left alone (a false hit
corrupts a reply), overlaps resolved, only the kinds asked for, and every match within `LONGEST`."""

from __future__ import annotations

from collections.abc import Collection

import pytest

from yao_agent.guardrails.pii import KINDS, LONGEST, Found, find, mask

# (kind, a sentence, the part of it that is personal data)
FOUND = {
    "email": ("email", "Write to jane.doe@example.co.uk today.", "jane.doe@example.co.uk"),
    "email with plus": ("email", "Cc: ops+alerts@mail.example.com, thanks", "ops+alerts@mail.example.com"),
    "email ending a sentence": ("email", "It went to bob_smith@example.org.", "bob_smith@example.org"),
    "intl phone": ("phone", "Call +44 20 7946 0958 after nine.", "+44 20 7946 0958"),
    "intl phone with area in brackets": ("phone", "US office: +1 (555) 123-4567.", "+1 (555) 123-4567"),
    "intl phone with a trunk zero": ("phone", "London +44 (0)20 7946 0958 now", "+44 (0)20 7946 0958"),
    "intl phone run together": ("phone", "SMS +442079460958 please", "+442079460958"),
    "intl phone then a time": ("phone", "Ring +44 20 7946 0958 12:30 tomorrow", "+44 20 7946 0958"),
    "NA phone in brackets": ("phone", "Office: (555) 123-4567, ext 2", "(555) 123-4567"),
    "NA phone with dashes": ("phone", "Cell 555-123-4567 or email", "555-123-4567"),
    "NA phone with dots": ("phone", "Fax 555.123.4567 (old)", "555.123.4567"),
    "NA toll-free": ("phone", "Dial 1-800-555-1234 for help", "1-800-555-1234"),
    "card in groups": ("credit_card", "Pay with 4111 1111 1111 1111 now", "4111 1111 1111 1111"),
    "card with dashes": ("credit_card", "Card 4111-1111-1111-1111 on file", "4111-1111-1111-1111"),
    "card run together": ("credit_card", "Card 4111111111111111 on file", "4111111111111111"),
    "mastercard": ("credit_card", "Use 5500 0000 0000 0004 instead", "5500 0000 0000 0004"),
    "amex 4-6-5": ("credit_card", "Amex 3782 822463 10005 works", "3782 822463 10005"),
    "diners 14 digits": ("credit_card", "Diners 30569309025904 works", "30569309025904"),
    "discover": ("credit_card", "Discover 6011111111111117 too", "6011111111111117"),
    "card before a comma": ("credit_card", "Pay with 4111111111111111, thanks.", "4111111111111111"),
    "card before a period": ("credit_card", "Pay with 4111111111111111.", "4111111111111111"),
    "card then a security code": ("credit_card", "4111 1111 1111 1111 123 exp 12/28", "4111 1111 1111 1111"),
    "card after Chinese": ("credit_card", "卡号4111111111111111。", "4111111111111111"),
    "IBAN in groups": ("iban", "IBAN DE89 3704 0044 0532 0130 00 please", "DE89 3704 0044 0532 0130 00"),
    "IBAN run together": ("iban", "IBAN DE89370400440532013000 please", "DE89370400440532013000"),
    "IBAN with letters": ("iban", "Send to GB82 WEST 1234 5698 7654 32.", "GB82 WEST 1234 5698 7654 32"),
    "IBAN then BIC": ("iban", "ES91 2100 0418 4502 0005 1332 BIC CAIXESBBXXX", "ES91 2100 0418 4502 0005 1332"),
    "IBAN then currency": ("iban", "BE68 5390 0754 7034 EUR", "BE68 5390 0754 7034"),
    "SSN": ("us_ssn", "SSN 123-45-6789 on the form", "123-45-6789"),
    "NINO spaced": ("uk_nino", "NI number AB 12 34 56 C, checked", "AB 12 34 56 C"),
    "NINO run together": ("uk_nino", "NI number AB123456C, checked", "AB123456C"),
}


@pytest.mark.parametrize(("kind", "sentence", "data"), FOUND.values(), ids=list(FOUND))
def test_each_kind_is_found_with_its_exact_span_and_masked(kind: str, sentence: str, data: str) -> None:
    start = sentence.index(data)
    assert find(sentence, KINDS) == [Found(start, start + len(data), kind)]
    assert find(sentence, [kind]) == [Found(start, start + len(data), kind)]
    assert mask(sentence, find(sentence, KINDS)) == sentence.replace(data, f"[{kind}]")


def test_a_card_is_masked_in_a_sentence() -> None:
    sentence = "Pay with 4111 1111 1111 1111."
    assert mask(sentence, find(sentence, KINDS)) == "Pay with [credit_card]."


NOT_FOUND = {
    "S3": "S3",
    "EKS": "EKS",
    "AWS": "AWS",
    "k8s": "k8s",
    "v1.2.3": "v1.2.3",
    "1.2.3": "1.2.3",
    "v10.4.2": "v10.4.2",
    "python version": "Python 3.11.7",
    "ISO date": "2026-12-03",
    "dotted date": "03.12.2026",
    "timestamp": "2026-12-03T12:30:45.123456+00:00",
    "time": "12:30:45",
    "IP address": "10.0.0.1",
    "private IP": "192.168.1.20",
    "order id": "order #1234567890",
    "long id": "account 123456789012",
    "hash": "sha256:e3b0c44298fc1c149afbf4c8996fb924",
    "uuid": "123e4567-e89b-12d3-a456-426614174000",
    "digits uuid": "12345678-1234-1234-1234-123456789012",
    "ISO 8601": "ISO 8601",
    "HTTP status": "HTTP/1.1 200",
    "plus one": "+1",
    "price": "$1,234,567.89",
    "ISBN": "ISBN 978-3-16-148410-0",
    "ISBN-10": "ISBN 0-306-40615-2",
    "signed number": "x = +123456789",
    "date after a plus": "GMT +1 2026-12-03",
    "IP after a plus": "+192.168.100.200",
    "card failing Luhn": "4111 1111 1111 1112",
    "Luhn-valid, no issuer": "1234567890123452",
    "Visa of a length never issued": "411111111111116",
    "card inside a longer number": "4111 1111 1111 1111 1111",
    "card inside a word": "x4111111111111111",
    "card inside a hex number": "0x4111111111111111",
    "card in a decimal": "4111111111111111.5",
    "IBAN checksum off by one": "GB82 WEST 1234 5698 7654 33",
    "IBAN lower case": "gb82 west 1234 5698 7654 32",
    "host without a dot": "user@localhost",
    "repository address": "me@code.example.com:team/app.repo",
    "image at 2x": "logo@2x.png",
    "package at a version": "widget@4.17.21",
    "SSN area 000": "000-12-3456",
    "SSN area 666": "666-12-3456",
    "SSN area 9xx": "900-12-3456",
    "SSN group 00": "123-00-4567",
    "SSN serial 0000": "123-45-0000",
    "NINO prefix never issued": "BG123456C",
    "NINO second letter never issued": "AO123456C",
    "NINO suffix E": "AB123456E",
    "NINO lower case": "ab123456c",
    "phone area code 1": "(123) 456-7890",
}


@pytest.mark.parametrize("text", NOT_FOUND.values(), ids=list(NOT_FOUND))
def test_look_alikes_are_left_alone(text: str) -> None:
    assert find(text, KINDS) == []
    sentence = f"See {text} here."
    assert find(sentence, KINDS) == []
    assert mask(sentence, find(sentence, KINDS)) == sentence


def test_a_reply_full_of_look_alikes_is_unchanged() -> None:
    reply = " ".join(NOT_FOUND.values())
    assert mask(reply, find(reply, KINDS)) == reply


def test_a_reply_with_every_kind_is_masked_and_the_rest_kept() -> None:
    reply = (
        "Jane (jane.doe@example.co.uk, +44 20 7946 0958) paid 4111 1111 1111 1111 on 2026-12-03 from "
        "DE89 3704 0044 0532 0130 00; SSN 123-45-6789, NI AB123456C, Python 3.11.7 on 10.0.0.1."
    )
    assert mask(reply, find(reply, KINDS)) == (
        "Jane ([email], [phone]) paid [credit_card] on 2026-12-03 from "
        "[iban]; SSN [us_ssn], NI [uk_nino], Python 3.11.7 on 10.0.0.1."
    )
    assert [f.start for f in find(reply, KINDS)] == sorted(f.start for f in find(reply, KINDS))


KINDS_ASKED: dict[str, tuple[Collection[str], list[str]]] = {
    "none": ((), []),
    "email": (("email",), ["email"]),
    "cards and ibans": (["credit_card", "iban"], ["credit_card", "iban"]),
    "phone and ssn": ({"phone", "us_ssn"}, ["phone", "us_ssn"]),
    "all": (KINDS, ["email", "phone", "credit_card", "iban", "us_ssn", "uk_nino"]),
}


@pytest.mark.parametrize(("kinds", "expected"), KINDS_ASKED.values(), ids=list(KINDS_ASKED))
def test_only_the_kinds_asked_for_are_found(kinds: Collection[str], expected: list[str]) -> None:
    text = "a@example.com, +44 20 7946 0958, 4111111111111111, DE89370400440532013000, 123-45-6789, AB123456C"
    assert [f.kind for f in find(text, kinds)] == expected


def test_an_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="passport"):
        find("anything", ["email", "passport"])


def test_overlapping_matches_keep_the_earlier_or_longer() -> None:
    # an address made of digits is an address, not a card followed by text
    text = "Mail 4111111111111111@example.com now"
    assert find(text, KINDS) == [Found(5, 33, "email")]
    # the whole `+1 (555) 123-4567`, not the North American number inside it
    text = "Call +1 (555) 123-4567"
    assert find(text, ["phone"]) == [Found(5, 22, "phone")]
    # asked for the card alone, the card is found where the address was
    assert find("4111111111111111@example.com", ["credit_card"]) == [Found(0, 16, "credit_card")]


def test_adjacent_matches_are_masked_each() -> None:
    text = "4111111111111111,5500000000000004 and a@example.com/b@example.com"
    assert mask(text, find(text, KINDS)) == "4111111111111111,5500000000000004 and [email]/[email]"
    text = "a@example.com 123-45-6789"
    assert mask(text, find(text, KINDS)) == "[email] [us_ssn]"


MASKS: dict[str, tuple[list[Found], str]] = {
    "none": ([], "abcdefghij"),
    "adjacent": ([Found(0, 2, "email"), Found(2, 4, "phone")], "[email][phone]efghij"),
    "given out of order": ([Found(6, 8, "iban"), Found(1, 3, "us_ssn")], "a[us_ssn]def[iban]ij"),
    "overlapping": ([Found(1, 5, "email"), Found(3, 8, "phone")], "a[email]ij"),
    "one inside another": ([Found(0, 9, "iban"), Found(2, 4, "phone")], "[iban]j"),
    "whole text": ([Found(0, 10, "uk_nino")], "[uk_nino]"),
}


@pytest.mark.parametrize(("found", "expected"), MASKS.values(), ids=list(MASKS))
def test_mask_hides_every_character_of_every_span(found: list[Found], expected: str) -> None:
    assert mask("abcdefghij", found) == expected


def test_longest_covers_every_match() -> None:
    longest = max(len(data) for _, _, data in FOUND.values())
    assert longest <= LONGEST
    many_groups = "+1 2 3 4 5 6 7 8"  # a `+` number in as many groups as there can be
    assert len(many_groups) + 28 <= LONGEST
    # the longest IBAN there is (Russia, 33 characters), grouped
    text = "RU02 0445 2560 0407 0281 0412 3456 7890 1"
    for f in find(text, KINDS):
        assert f.end - f.start <= LONGEST


def test_an_address_longer_than_longest_is_not_found() -> None:
    address = "a" * 40 + "@" + "example-department-of-things.com"
    assert len(address) > LONGEST
    assert find(f"Mail {address} now", KINDS) == []
    fits = "a" * (LONGEST - len("@example.com")) + "@example.com"
    assert find(fits, KINDS) == [Found(0, LONGEST, "email")]


def test_long_and_hostile_text_is_fast_enough_to_finish() -> None:
    # many near-misses in a row: bounded patterns keep each one cheap
    hostile = ("1" * 50 + " " + "a" * 70 + "@" + "b." * 40 + " " + "+1 " * 40 + "1-" * 40 + "AB" + "1" * 40) * 20
    assert find(hostile, KINDS) == []
