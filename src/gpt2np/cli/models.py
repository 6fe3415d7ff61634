"""``gpt2np download``, ``convert``, ``info`` and ``stress-weights``: fetch a release, write HF's
format, describe a model, write stress weights of a model's shapes."""

from __future__ import annotations

import argparse
import json
import os
import pathlib
from typing import Any

from ..support.paths import expand_user
from .common import add_model_args, load_model, progress_of

__all__ = ["add_parsers", "hparams_like", "run_convert", "run_download", "run_info", "run_stress"]


def add_parsers(sub: Any) -> None:
    _add_download(sub)
    _add_convert(sub)
    _add_info(sub)
    _add_stress(sub)


def _add_download(sub: Any) -> None:
    p = sub.add_parser("download", help="fetch OpenAI's release files of a model size")
    p.add_argument(
        "name", metavar="NAME", help="124M, 355M, 774M or 1558M (or gpt2, gpt2-medium, ...)"
    )
    p.add_argument("--models-dir", help="parent directory (default $GPT2NP_HOME/models)")
    p.add_argument("--base-url", help="download base (default $GPT2NP_BASE_URL or OpenAI's)")
    p.set_defaults(func=run_download)


def run_download(args: argparse.Namespace) -> int:
    from ..sources.openai import download

    progress = progress_of(args)
    print(
        download(args.name, models_dir=args.models_dir, base_url=args.base_url, progress=progress)
    )
    return 0


def _add_convert(sub: Any) -> None:
    p = sub.add_parser(
        "convert",
        help="write a model as HF config.json + model.safetensors",
        description="Load SRC (a published name or a directory) and write DST/config.json and "
        "DST/model.safetensors, loadable by gpt2np and by HF transformers.",
    )
    p.add_argument("src", metavar="SRC")
    p.add_argument("dst", metavar="DST")
    p.add_argument("--revision", help="SRC's branch, tag or commit when it is a Hub repo id")
    p.add_argument("--dtype", choices=["float32", "float64"], help="cast the weights")
    p.set_defaults(func=run_convert)


def run_convert(args: argparse.Namespace) -> int:
    from ..api import save

    model = load_model(args.src, args.dtype, args.revision, progress_of(args))
    save(model, args.dst)
    print(f"wrote {os.path.join(args.dst, 'config.json')} and model.safetensors ({model!r})")
    return 0


def _add_info(sub: Any) -> None:
    p = sub.add_parser(
        "info",
        help="hparams, parameter count, dtype and where the files are",
        description="Describe a model. A published name that is not downloaded yet is "
        "described from its published hparams, without downloading.",
    )
    add_model_args(p, dtype=False)
    p.add_argument("--json", action="store_true", help="print one JSON object (docs/cli.md)")
    p.set_defaults(func=run_info)


def run_info(args: argparse.Namespace) -> int:
    from ..checkpoint.conversion_cache import default_cache_dir
    from ..hparams import HPARAMS
    from ..sources.openai import KNOWN_NAMES, missing_files, model_dir, resolve_name
    from ..sources.openai_release_digests import provenance

    path = pathlib.Path(expand_user(args.model, "--model"))  # ~nosuchuser: a ValueError
    source, text_use, downloaded, weights = None, None, None, None
    if path.exists() or args.model not in KNOWN_NAMES:  # a directory, or a Hub repo
        model = load_model(args.model, None, args.revision, progress_of(args))
        hparams, dtype, source = model.hparams, str(model.dtype), model.source
        where = str(path.resolve()) if source is None else f"{source.repo} at {source.commit}"
        text_use = _text_use(model)
    else:
        name = resolve_name(args.model)  # ValueError naming the known names
        where = str(model_dir(name))
        downloaded = not missing_files(where)
        hparams, dtype = HPARAMS[name], "float32"
        weights = provenance(where, name, default_cache_dir()).text if downloaded else None
    info: dict[str, Any] = {"model": args.model, "files": where}
    if downloaded is not None:
        info |= {"downloaded": downloaded, "weights": weights}
    if source is not None:
        info |= {"revision": source.revision, "commit": source.commit, "offline": source.offline}
        info["hub_files"] = {name: str(file) for name, file in source.files.items()}
        info["hf_cache"] = sorted(source.hf_cache)
    info |= {"cache": str(default_cache_dir()), "hparams": hparams.to_dict(),
             "parameters": hparams.n_params, "dtype": dtype, "text": text_use}  # fmt: skip
    if args.json:
        print(json.dumps(info, ensure_ascii=False))
    else:
        _print_info(info)
    return 0


def _print_info(info: dict[str, Any]) -> None:
    print(f"model       {info['model']}")
    if "commit" in info:
        print(f"revision    {info['revision']} -> commit {info['commit']}")
        if info["offline"]:
            print(f"offline     {info['offline']}")
    print(
        f"files       {info['files']}"
        + ("" if info.get("downloaded", True) else " (not downloaded)")
    )
    for name, file in info.get("hub_files", {}).items():
        mark = " (huggingface_hub's cache)" if name in info["hf_cache"] else ""
        print(f"  {name:<34} {file}{mark}")
    print(f"cache       {info['cache']}")
    for key, value in info["hparams"].items():
        print(f"{key:<11} {value}")
    print(f"parameters  {info['parameters']:,}")
    print(f"dtype       {info['dtype']}")
    if info.get("weights") is not None:
        print(f"weights     {info['weights']}")
    if info["text"] is not None:
        print(f"text        {info['text']}")


def _text_use(model: Any) -> str:
    """Whether the model's tokenizer can encode text, and if not, why."""
    from ..errors import CheckpointError

    try:
        tokenizer = model.tokenizer
    except (CheckpointError, ValueError) as e:
        return "no: " + " ".join(str(e).split()) + " (token ids work)"
    files = ", ".join(getattr(tokenizer, "files", ()))
    return f"yes ({files or 'GPT-2 bundled vocabulary'}; eot {model.eot_token})"


def _add_stress(sub: Any) -> None:
    p = sub.add_parser(
        "stress-weights",
        help="write random weights of a model's shapes in which every parameter matters",
        description="Write a checkpoint with the hparams of SIZE_OR_DIR (a size name needs no "
        "files) and stress weights (gpt2np.golden.stress): non-zero biases, LayerNorm gains != 1 "
        "and biases != 0, attention scores past float16's exp overflow. Golden files dumped "
        "from it catch a dropped bias or a softmax without max-subtraction, which plain random "
        "weights hide (docs/golden-files.md).",
    )
    p.add_argument(
        "--like",
        required=True,
        metavar="SIZE_OR_DIR",
        help="a size name (124M, 355M, 774M, 1558M, gpt2, ...) or a model directory",
    )
    p.add_argument("--out", required=True, metavar="DIR", help="a new or empty directory")
    p.add_argument("--seed", type=int, default=0, help="the random seed (default 0)")
    p.add_argument("--format", choices=["hf", "openai"], default="hf",
                   help="hf: config.json + model.safetensors (default); openai: refused, gpt2np "
                   "has no writer of OpenAI's TF checkpoint")  # fmt: skip
    p.set_defaults(func=run_stress)


def hparams_like(like: str) -> Any:
    """The hparams of ``like``: a directory's (HF's config.json, or OpenAI's hparams.json), read
    without loading any weights; else a published size name's (gpt2np.HPARAMS)."""
    from ..checkpoint.convert import hparams_from_hf_config
    from ..checkpoint.hf import read_json
    from ..hparams import HPARAMS, HParams
    from ..sources.openai import KNOWN_NAMES, resolve_name

    path = expand_user(like, "--like")
    if os.path.isdir(path):
        config, openai = os.path.join(path, "config.json"), os.path.join(path, "hparams.json")
        if os.path.isfile(config):
            return hparams_from_hf_config(read_json(config), config)
        if os.path.isfile(openai):
            from ..errors import CheckpointError

            data = read_json(openai)
            try:
                return HParams.from_dict(data)
            except (TypeError, ValueError, AttributeError) as e:
                raise CheckpointError(f"{openai}: {e}") from None
        raise ValueError(f"--like {like}: the directory holds neither config.json nor hparams.json")
    if like in KNOWN_NAMES:
        return HPARAMS[resolve_name(like)]
    raise ValueError(
        f"--like {like!r} is neither a directory nor a size name ({', '.join(KNOWN_NAMES)})"
    )


def run_stress(args: argparse.Namespace) -> int:
    from ..api import save
    from ..golden.stress import stress_params
    from ..gpt2 import GPT2

    if args.format == "openai":
        raise ValueError(
            "--format openai: gpt2np reads OpenAI's TF checkpoint but has no writer of it, and "
            "will not fake one; use --format hf (config.json + model.safetensors, which gpt2np "
            "and HF transformers load)"
        )
    if args.seed < 0:
        raise ValueError(f"--seed must be >= 0, got {args.seed}")
    out = expand_user(args.out, "--out")
    if os.path.lexists(out) and (not os.path.isdir(out) or os.listdir(out)):
        what = "is not empty" if os.path.isdir(out) else "exists and is not a directory"
        raise ValueError(f"--out {args.out} {what}: give a new or empty directory")
    hparams = hparams_like(args.like)
    model = GPT2(hparams, stress_params(hparams, args.seed))
    save(model, out)
    print(
        f"wrote {os.path.join(args.out, 'config.json')} and model.safetensors: stress weights "
        f"like {args.like} (n_layer {hparams.n_layer}, n_embd {hparams.n_embd}, n_head "
        f"{hparams.n_head}, n_vocab {hparams.n_vocab}), seed {args.seed}"
    )
    return 0
