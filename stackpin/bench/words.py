"""The words a replayed prompt is built from, so that the server counts the trace's tokens.

Without a tokenizer a prompt word is `<salt>b<block>_<i>`: one token to stackpin's simulator, but
several to a real model's tokenizer (a 3,270-token turn once arrived as 45,101). With the served
model's tokenizer.json (`bench run --tokenizer`, or the one the Dynamo bed serves), every word is one
the tokenizer keeps as a single token after a space, so a turn's `input_length` words are that many
tokens. A block's 512 words are drawn from that vocabulary by a generator seeded with the salt and
the block's name (sha512 of the text: the same in every process and run), so the same block id is the
same text wherever it appears and a server's prefix cache sees the trace's reuse.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import lru_cache

from stackpin.bench.trace import BLOCK_TOKENS
from stackpin.errors import StackpinError

MAX_WORDS = 16384  # plenty to make every block distinct; more only costs memory in every worker
MAX_TOKENIZER_BYTES = 64 << 20  # a large real tokenizer.json is ~10 MB


@dataclass(frozen=True)
class Vocabulary:
    """Single-token words of a tokenizer, and where they came from (recorded in the result)."""

    words: tuple[str, ...]
    source: str  # e.g. "tokenizer.json sha256:..."

    def block(self, salt: str, name: str) -> tuple[str, ...]:
        """Block `name`'s 512 words; the same (salt, name) gives the same words everywhere."""
        return _block(self.words, salt, name)


@lru_cache(maxsize=4096)  # a shared system prompt's blocks come back every turn of every session
def _block(words: tuple[str, ...], salt: str, name: str) -> tuple[str, ...]:
    return tuple(random.Random(f"{salt}\0{name}").choices(words, k=BLOCK_TOKENS))  # noqa: S311 - not secrets


def from_tokenizer(data: bytes, source: str) -> Vocabulary:
    """The single-token words of a tokenizer.json (the `tokenizers` library reads it as the model's own
    tokenizer does); refused in one line when it is not one, or keeps too few such words."""
    from stackpin.extras import require

    require("tokenizer")
    from tokenizers import Tokenizer

    if len(data) > MAX_TOKENIZER_BYTES:
        raise StackpinError(f"{source}: over {MAX_TOKENIZER_BYTES >> 20} MiB; not a tokenizer.json")
    try:
        tokenizer = Tokenizer.from_str(data.decode("utf-8"))
    except (UnicodeDecodeError, Exception) as exc:  # noqa: BLE001 - the library raises plain Exception
        raise StackpinError(f"{source}: not a tokenizer.json the tokenizers library reads: "
                            f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    special = {t.content for t in tokenizer.get_added_tokens_decoder().values()}
    candidates: list[str] = []
    for piece, token_id in sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1]):
        if piece in special:
            continue
        text = tokenizer.decode([token_id], skip_special_tokens=True).strip()
        if 2 <= len(text) <= 12 and text.isascii() and text.isalnum():
            candidates.append(text)
    candidates = sorted(set(candidates))
    words: list[str] = []
    for start in range(0, len(candidates), 4096):
        batch = candidates[start:start + 4096]
        encoded = tokenizer.encode_batch([" " + w for w in batch], add_special_tokens=False)
        words += [w for w, e in zip(batch, encoded, strict=True) if len(e.ids) == 1]
    if len(words) < 256:
        raise StackpinError(f"{source}: only {len(words)} words are one token each; cannot size prompts with it")
    step = max(1, len(words) // MAX_WORDS)
    return Vocabulary(tuple(words[::step][:MAX_WORDS]), source)
