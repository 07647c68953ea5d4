"""Answer keys that are not stored in plain text.

The instructor's checks compare an answer with its key as written (``"b"``). The student edition
(``normlab release``) replaces each key by ``"sha256:SALT:DIGEST"``, the SHA-256 of the salt and
the normalized answer, and the checks compare hashes instead. This only keeps keys from being
read at a glance: a multiple-choice key among four letters is found by trying them all, which is
why the in-notebook checks are formative and the instructor's grade is the authority.
"""

from __future__ import annotations

import hashlib
import hmac

PREFIX = "sha256:"


def digest(answer: str, salt: str) -> str:
    return hashlib.sha256(f"{salt}:{answer}".encode()).hexdigest()


def hashed(answer: str, salt: str) -> str:
    """The stored form of a key: ``sha256:SALT:DIGEST``."""
    return f"{PREFIX}{salt}:{digest(answer, salt)}"


def matches(answer: str | None, key: str) -> bool:
    """Whether a normalized answer is the key, stored plain or hashed."""
    if not isinstance(answer, str):
        return False
    if key.startswith(PREFIX):
        salt, _, expected = key[len(PREFIX) :].partition(":")
        return hmac.compare_digest(digest(answer, salt), expected)
    return answer == key
