"""Smoke test of gpt2np as a user installs it: run it with the Python of a fresh venv that holds
the built wheel, from a directory outside the source tree (.ci/run does).

    python scripts/smoke_wheel.py --wheel gpt2np-X-py3-none-any.whl --sdist gpt2np-X.tar.gz

Checks, each printed as it passes (exit 1 at the first failure, naming it):
gpt2np is imported from the venv's site-packages, not from a source tree; one version in the
wheel's and sdist's names, the metadata, ``gpt2np.__version__`` and ``gpt2np --version``; the
bundled vocabulary is there with the SHA-256 pins of gpt2np.tokenizer.tokenizer and encodes "Hello
world"
as GPT-2 does; the ``gpt2np`` command runs tokenize, detokenize and info (no weights, no
network); the licences (gpt2np's MIT, and OpenAI's notice for the vocabulary) are in the
wheel's dist-info, the installed package and the sdist; ``py.typed`` ships; and
scripts/check_imports.py finds only the four runtime dependencies (and what they require) and
the standard library imported, at import time and during a forward pass.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import pathlib
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import zipfile
from importlib import metadata

LICENSES = ("LICENSE", "src/gpt2np/data/LICENSE-gpt2.txt")  # pyproject's license-files
HELLO_WORLD = [15496, 995]  # GPT-2's ids of "Hello world" (tiktoken's gpt2 gives the same)


class SmokeError(Exception):
    pass


def check(ok: object, what: str) -> None:
    if not ok:
        raise SmokeError(what)


def run(*args: str, **env: str) -> str:
    proc = subprocess.run(
        args, capture_output=True, text=True, timeout=300, env={**os.environ, **env}
    )
    check(proc.returncode == 0, f"{' '.join(args)} exited {proc.returncode}: {proc.stderr}")
    return proc.stdout


def installed_from_site_packages() -> pathlib.Path:
    import gpt2np

    package = pathlib.Path(gpt2np.__file__).resolve().parent
    site = pathlib.Path(sysconfig.get_paths()["purelib"]).resolve()
    check(site in package.parents, f"gpt2np was imported from {package}, not from {site}")
    return package


def versions(wheel: pathlib.Path | None, sdist: pathlib.Path | None) -> str:
    import gpt2np

    version = metadata.version("gpt2np")
    check(gpt2np.__version__ == version, f"__version__ {gpt2np.__version__}, metadata {version}")
    cli = run(gpt2np_command(), "--version").strip()
    check(cli == f"gpt2np {version}", f"gpt2np --version printed {cli!r}, expected {version}")
    if wheel is not None:
        check(wheel.name.startswith(f"gpt2np-{version}-"), f"wheel {wheel.name} is not {version}")
    if sdist is not None:
        check(sdist.name == f"gpt2np-{version}.tar.gz", f"sdist {sdist.name} is not {version}")
    return version


def vocabulary(package: pathlib.Path) -> None:
    from gpt2np import Tokenizer
    from gpt2np.tokenizer.tokenizer import ENCODER_JSON_SHA256, VOCAB_BPE_SHA256

    for name, pin in (("encoder.json", ENCODER_JSON_SHA256), ("vocab.bpe", VOCAB_BPE_SHA256)):
        path = package / "data" / name
        check(path.is_file(), f"the bundled {name} is missing ({path})")
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        check(digest == pin, f"{path}: SHA-256 {digest}, pinned {pin}")
    ids = Tokenizer().encode("Hello world")  # checks the pins itself too
    check(ids == HELLO_WORLD, f'the bundled vocabulary encodes "Hello world" as {ids}')


def gpt2np_command() -> str:
    path = pathlib.Path(sysconfig.get_paths()["scripts"]) / "gpt2np"
    check(path.is_file(), f"the gpt2np command is not in {path.parent}")
    return str(path)


def command_line() -> None:
    cmd = gpt2np_command()
    out = run(cmd, "tokenize", "Hello world").split()
    check(out == [str(i) for i in HELLO_WORLD], f"gpt2np tokenize printed {out}")
    out = run(cmd, "detokenize", *map(str, HELLO_WORLD))
    check(out.rstrip("\n") == "Hello world", f"gpt2np detokenize printed {out!r}")
    with tempfile.TemporaryDirectory() as home:  # described from published hparams: no download
        out = run(cmd, "info", "--model", "124M", GPT2NP_HOME=home)
    check("parameters  124,439,808" in out, f"gpt2np info --model 124M printed {out!r}")


def licences(package: pathlib.Path, wheel: pathlib.Path | None, sdist: pathlib.Path | None) -> None:
    dist = metadata.distribution("gpt2np")
    declared = dist.metadata.get_all("License-File") or []
    check(sorted(declared) == sorted(LICENSES), f"License-File fields {declared}")
    names = {str(f) for f in dist.files or ()}
    for lic in LICENSES:
        check(
            any(n.endswith(f".dist-info/licenses/{lic}") for n in names),
            f"{lic} is not in the installed dist-info",
        )
    check((package / "data" / "LICENSE-gpt2.txt").is_file(), "the vocabulary's licence is gone")
    if wheel is not None:
        with zipfile.ZipFile(wheel) as z:
            members = z.namelist()
        for lic in LICENSES:
            check(
                any(m.endswith(f".dist-info/licenses/{lic}") for m in members),
                f"{lic} not in wheel",
            )
        check("gpt2np/py.typed" in members, "py.typed is not in the wheel")
    if sdist is not None:
        with tarfile.open(sdist) as t:
            members = [m.split("/", 1)[1] for m in t.getnames() if "/" in m]
        for needed in (*LICENSES, "src/gpt2np/py.typed", "pyproject.toml", "README.md"):
            check(needed in members, f"{needed} is not in the sdist")


def typed(package: pathlib.Path) -> None:
    check((package / "py.typed").is_file(), "py.typed is not installed")


def imports() -> None:
    script = pathlib.Path(__file__).with_name("check_imports.py")
    print("   ", run(sys.executable, str(script)).strip())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheel", type=pathlib.Path, help="the wheel that was installed")
    parser.add_argument("--sdist", type=pathlib.Path, help="the sdist built with it")
    args = parser.parse_args()
    try:
        package = installed_from_site_packages()
        print(f"ok  gpt2np imported from {package}")
        print(f"ok  one version everywhere: {versions(args.wheel, args.sdist)}")
        vocabulary(package)
        print("ok  bundled vocabulary present, SHA-256 as pinned, encodes as GPT-2")
        command_line()
        print("ok  gpt2np command: --version, tokenize, detokenize, info")
        licences(package, args.wheel, args.sdist)
        typed(package)
        print("ok  licences in the dist-info, the wheel and the sdist; py.typed ships")
        imports()
        print("ok  imports: the four runtime dependencies and the standard library only")
    except SmokeError as e:
        print(f"smoke test FAILED: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
