"""Write tests/fixtures/tokenizer_cases.json: texts and the ids tiktoken gives them.

    /work/venv/bin/python scripts/make_tokenizer_fixture.py

tiktoken (OpenAI's Rust BPE) is an implementation independent of gpt2np's; this fixture lets the
default test run, which does not need tiktoken, still compare gpt2np against it. tiktoken's gpt2
encoding is built OFFLINE from the two files bundled in gpt2np/data (no download): tiktoken's
own pre-tokenisation pattern (``r50k_pat_str``) and ``mergeable_ranks`` = token bytes -> id,
decoding encoder.json's byte alphabet with a table derived here, independently of
gpt2np.tokenizer.bpe.

Cases: hand-written texts (prose, source code, many scripts, emoji, whitespace, contractions,
digits, punctuation, special-token text, lone surrogates), long single pieces (where the fast
merge takes its heap path), a slice of Python's reference manual (``pydoc_data.topics``) and of
a stdlib source file, and seeded random strings. Each case is ``{"text", "allowed_special",
"ids"}``; allowed_special is [] or "all".

Also, for the per-token methods: ``offsets``, tiktoken's ``decode_with_offsets`` of the ids of
texts whose tokens split characters, and ``token_byte_values_sha256``, the SHA-256 of tiktoken's
``token_byte_values()`` written as comma-separated hex.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import random
import textwrap
import unicodedata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "src" / "gpt2np" / "data"
OUT = ROOT / "tests" / "fixtures" / "tokenizer_cases.json"


def offline_tiktoken():  # -> tiktoken.Encoding
    """tiktoken's gpt2 encoding from the bundled encoder.json, without any download."""
    import tiktoken
    from tiktoken_ext.openai_public import r50k_pat_str

    # encoder.json writes byte b as chr(b) when that is printable and not a space, and the
    # remaining bytes, in order, as chr(256), chr(257), ...
    printable = [b for b in range(256) if chr(b).isprintable() and chr(b) != " "]
    rest = [b for b in range(256) if b not in printable]
    char_to_byte = {chr(b): b for b in printable} | {chr(256 + k): b for k, b in enumerate(rest)}
    encoder = json.loads((DATA / "encoder.json").read_text(encoding="utf-8"))
    ranks = {
        bytes(char_to_byte[c] for c in token): i
        for token, i in encoder.items()
        if token != "<|endoftext|>"
    }
    return tiktoken.Encoding(
        "gpt2-offline",
        pat_str=r50k_pat_str,
        mergeable_ranks=ranks,
        special_tokens={"<|endoftext|>": 50256},
        explicit_n_vocab=50257,
    )


CODE_SAMPLE = '''\
def fib(n: int) -> int:
    """Return the n-th Fibonacci number."""
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


if __name__ == "__main__":
\tprint({"fib(10)": fib(10), 'x': [1, 2, 3]})  # tab-indented on purpose
'''

C_SAMPLE = """#include <stdio.h>
int main(int argc, char **argv) {
    for (int i = 0; i < argc; ++i) { printf("%d: %s\\n", i, argv[i]); }
    return argc > 1 ? 0 : -1; /* done */
}
"""

HAND_WRITTEN = [
    # published / well-known
    "Hello world",
    " Hello world",
    "hello world",
    "Hello, world!",
    "Alan Turing theorized that computers would one day become very powerful.",
    # English prose
    "The quick brown fox jumps over the lazy dog. It wasn't the first time; it won't be the "
    'last. "Why?" asked Mr. O\'Neil — nobody knew.\n\nA new paragraph begins here.',
    # source code
    CODE_SAMPLE,
    C_SAMPLE,
    '{"key": [1, 2.5, null, true], "nested": {"a": "b\\n"}}',
    '<html><body class="x"><p>Hi &amp; bye</p></body></html>',
    # scripts
    "我爱自然语言处理。東京は日本の首都です。",
    "한국어 텍스트도 있습니다.",
    "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "Ξεσκεπάζω την ψυχοφθόρα βδελυγμία. Γειά σου Κόσμε!",
    "نص حكيم له سر قاطع وذو شأن عظيم مكتوب على ثوب أخضر",
    "דג סקרן שט בים מאוכזב ולפתע מצא חברה",
    "เป็นมนุษย์สุดประเสริฐเลิศคุณค่า",
    "ខ្ញុំអាចញ៉ាំកញ្ចក់បាន ដោយគ្មានបញ្ហា",
    "Tiếng Việt có dấu: Trăm năm trong cõi người ta, chữ tài chữ mệnh khéo là ghét nhau.",
    unicodedata.normalize("NFD", "Tiếng Việt, café, naïve, Ångström"),
    "नमस्ते दुनिया; ქართული ენა; Հայերեն լեզու",
    # emoji: modifiers, ZWJ sequences, flags, variation selectors
    "👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 🧑🏿‍💻 ❤️ 😀😃😄",
    "🇺🇸🇯🇵🇩🇪🇫🇷 flags, and a keycap 1️⃣",
    # whitespace runs
    "a  b",
    "a   b    c",
    "a\t\tb\t",
    "\n\n\n",
    "  \n  \n",
    " \t \n\r\n x",
    "   leading",
    "trailing   ",
    "tabs\tand\nnewlines\r\nmixed \t\n \t",
    "\u00a0non-breaking\u2003em space\u3000ideographic",
    "",
    " ",
    "\n",
    # contractions, both cases
    "I'm he's she'd we'll they've you're it's don't",
    "I'M HE'S SHE'D WE'LL THEY'VE YOU'RE IT'S DON'T",
    "We'Ve 'S 'RE 'Ll 'M 'D 'T",
    "rock 'n' roll, ''s, 's's, '''",
    # digits
    "0",
    "00",
    "000",
    "0000",
    "00000",
    "000000",
    "0000000",
    "1234567890 12345678901234567890 3.14159 1,000,000 2024-01-01 0x1F 1e-10",
    "٣٤٥ ½ ² Ⅻ ①②",
    # punctuation runs
    "!!!??? ... --- *** ### @@@ $$$ %%% ^^^ &&& ((( ))) [[[ ]]] {{{ }}} <<< >>> ~~~",
    "``` ''' \"\"\" ;;; ::: ,,, — – «» „“ … ¿¡",
    # special-token text read as ordinary text
    "<|endoftext|>",
    "Hello<|endoftext|>World",
    "<|endoftext|",
    # long repeats
    "a" * 1000,
    "ab" * 500,
    " " * 100,
    "😀" * 50,
    "\n" * 50,
    # lone surrogates (tiktoken: paired halves combine, lone ones become U+FFFD)
    "a\ud800b",
    "\ud83d\ude00 pair",
    "\udc00\ud800 reversed",
]

SPECIAL = [
    "hello <|endoftext|>",
    "Hello<|endoftext|>World",
    "<|endoftext|><|endoftext|>",
    "<|endoftext|",
    "x <|endoftext|> y",
]

ALPHABETS = [
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
    "0123456789",
    " " * 8 + "\t\n\r\u00a0",
    "'.,;:!?-()[]{}\"/\\@#$%^&*_+=<>|`~",
    "éèêëàâäôöûüçñßøåæœ",
    "абвгдежзийклмнопрстуфхцчшщъыьэюяАБВ",
    "αβγδεζηθικλμνξοπρστυφχψω",
    "的一是不了人我在有他这为之大来以个中上们",
    "กขคงจฉชซญฎฏฐ่้๊๋ะาำ",
    "😀😃😄🏽\u200d👍❤\ufe0f🇺🇸",
]


def random_texts(n: int, seed: int = 1234) -> list[str]:
    """Seeded random strings mixing words, whitespace, contractions and several scripts."""
    rng = random.Random(seed)
    texts = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 12)):
            if rng.random() < 0.1:
                parts.append(rng.choice(["'s", "'S", "'ve", "'RE", "'ll", "'d"]))
            else:
                alphabet = rng.choice(ALPHABETS)
                parts.append("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 8))))
        texts.append("".join(parts))
    return texts


def long_pieces() -> list[str]:
    """Single pre-tokeniser pieces of thousands of bytes: seeded random CJK, Latin letters."""
    rng = random.Random(99)
    return [
        "".join(chr(rng.randint(0x4E00, 0x9FFF)) for _ in range(3000)),
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyzéüß") for _ in range(4000)),
        " " + "ab" * 1500,
        "1234567890" * 300,
    ]


OFFSET_TEXTS = [
    "hello world",
    "héllo 😀 wörld",
    "我爱自然语言处理。東京は日本の首都です。",
    "👨\u200d👩\u200d👧 🇺🇸 1️⃣ e\u0301",
    "เป็นมนุษย์สุดประเสริฐ",
    "Съешь же ещё этих мягких французских булок",
]


def corpus_samples() -> list[str]:
    """Real text: reference-manual prose and a stdlib source file (textwrap)."""
    import pydoc_data.topics

    prose = "".join(pydoc_data.topics.topics[k] for k in sorted(pydoc_data.topics.topics))
    return [prose[:6000], inspect.getsource(textwrap)[:6000]]


def main() -> None:
    import tiktoken

    enc = offline_tiktoken()
    cases = []
    for text in HAND_WRITTEN + long_pieces() + corpus_samples() + random_texts(300):
        cases.append({"text": text, "allowed_special": [], "ids": enc.encode_ordinary(text)})
    for text in SPECIAL:
        ids = enc.encode(text, allowed_special="all")
        cases.append({"text": text, "allowed_special": "all", "ids": ids})
    OUT.parent.mkdir(parents=True, exist_ok=True)
    about = "ids from tiktoken's gpt2 encoding; made by scripts/make_tokenizer_fixture.py"
    lines = ",\n".join(json.dumps(case) for case in cases)  # one case per line: readable diffs
    offsets = ",\n".join(
        json.dumps({"ids": ids, "offsets": enc.decode_with_offsets(ids)[1]})
        for ids in map(enc.encode_ordinary, OFFSET_TEXTS)
    )
    values = ",".join(b.hex() for b in enc.token_byte_values())
    digest = hashlib.sha256(values.encode("ascii")).hexdigest()
    head = f'{{"about": {json.dumps(about)}, "tiktoken_version": "{tiktoken.__version__}",\n'
    tail = f'"offsets": [\n{offsets}\n],\n"token_byte_values_sha256": "{digest}"'
    tmp = OUT.with_suffix(".json.tmp")
    tmp.write_text(f'{head}"cases": [\n{lines}\n],\n{tail}}}\n', encoding="utf-8")
    tmp.replace(OUT)
    print(f"wrote {len(cases)} cases to {OUT}")


if __name__ == "__main__":
    main()
