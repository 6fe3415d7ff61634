"""Every generation option, defined once: its name, default, type, check and help text.

:data:`OPTIONS` is the one definition (as HF transformers' ``GenerationConfig`` is theirs). The
rest follows from it or is tested equal to it: the keyword arguments of
:meth:`gpt2np.GPT2.generate`, :func:`gpt2np.generation.loop.generate` and
:func:`gpt2np.generate` (their signatures, made from it), the overloads that type their results
(:mod:`gpt2np.generation.results`, tested to name these options with these defaults), their
help text, the ``gpt2np generate`` flags (``gpt2np.cli.generate`` adds
one per option that has a :class:`Flag`, with this help and this check), and
:func:`check_args`, the one validator of the library and the command line.

Where a default comes from. An option whose default is None and that is marked ``config``
takes, when the call does not give it, the value of the same key in the model's
``generation_config.json`` (``model.generation_config``), as in HF: ``do_sample: true, top_k:
3`` there makes a plain call sample from 3 tokens. A key the file does not set keeps gpt2np's
own default, which is OpenAI's (sampling at temperature 1 from the whole vocabulary; HF's
library defaults differ: greedy, ``top_k=50``). OpenAI's release has no generation_config.json,
so OpenAI's defaults hold for it.

``gpt2np.generate("hi", model="124M", top_p=2)`` must fail before 124M is downloaded, so every
check that needs no model lives here; the few that need the model (ids within its vocabulary,
an ``<|endoftext|>`` to start an empty prompt from) are made by the generation itself.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable, Optional, Union

import numpy as np

from ..errors import warn
from ..support.checks import check_int, check_real, is_int
from . import processors, sampling
from .completion import LOGPROBS_MODES
from .processors import Penalties
from .sampling import Sampling

__all__ = [
    "CONFIG_NOT_APPLIED",
    "CONTEXT_MODES",
    "EARLY_STOPPING",
    "HF_UNSUPPORTED",
    "OPTIONS",
    "Flag",
    "Option",
    "Options",
    "check_args",
    "describe",
    "signature",
    "split_prompt",
]

#: Values of ``context=``: "error" refuses to exceed n_ctx, "slide" keeps the last n_ctx tokens.
CONTEXT_MODES = ("error", "slide")
#: Values of ``early_stopping=`` for beam search, as in HF transformers.
EARLY_STOPPING = (True, False, "never")
#: max_new_tokens when neither the call nor the model's generation_config.json says.
DEFAULT_MAX_NEW_TOKENS = 50


@dataclass(frozen=True)
class Flag:
    """How ``gpt2np generate`` takes an option: ``--name-with-dashes VALUE`` (or ``names``).
    kind: "int", "float", "str", "ids" (``"15496 995"``), "pair" (``"START,FACTOR"``),
    "choice" (one of ``choices``, given as text), "switch" (no value: True)."""

    kind: str
    metavar: Optional[str] = None
    choices: tuple[Any, ...] = ()
    names: tuple[str, ...] = ()
    repeat: bool = False


@dataclass(frozen=True)
class Option:
    """One generation option. ``default`` is the signature's; ``check(name, value)`` returns
    the value as the generation uses it or raises ValueError/TypeError naming it (None, the
    default of most, is "not given" and is not checked); ``config``: generation_config.json's
    key of the same name gives the default when the call does not."""

    name: str
    default: Any
    annotation: str
    group: str
    help: str
    check: Callable[[str, Any], Any]
    config: bool = False
    flag: Optional[Flag] = None


# -- the checks that are not a sampling filter's or a logit rule's ----------------------------


def _count(minimum: int) -> Callable[[str, Any], int]:
    return lambda name, value: check_int(name, value, minimum=minimum)


def _choice(values: tuple[str, ...]) -> Callable[[str, Any], str]:
    def check(name: str, value: Any) -> str:
        if not isinstance(value, str) or value not in values:
            raise ValueError(f"{name} must be one of {values}, got {value!r}")
        return value

    return check


def _bool(name: str, value: Any) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def _positive(name: str, value: Any) -> float:
    x = check_real(name, value)
    if not x > 0:
        raise ValueError(f"{name} must be > 0, got {value}")
    return x


def _seed(name: str, value: Any) -> Any:
    if isinstance(value, np.random.Generator):
        return value
    if not is_int(value):
        raise TypeError(f"{name} must be an int, a numpy Generator or None, got {value!r}")
    return check_int(name, value, minimum=0)


def _stop(name: str, value: Any) -> tuple[str, ...]:
    stops = (value,) if isinstance(value, str) else value
    if not isinstance(stops, (list, tuple)) or not all(isinstance(s, str) for s in stops):
        raise TypeError(f"{name} must be a str or a list of str, got {value!r}")
    if any(s == "" for s in stops):
        raise ValueError(f"{name} strings must not be empty")
    return tuple(stops)


def _early_stopping(name: str, value: Any) -> Union[bool, str]:
    if not (isinstance(value, bool) or (isinstance(value, str) and value == "never")):
        raise ValueError(f"{name} must be True, False or 'never', got {value!r}")
    return value


def _functions(name: str, value: Any) -> tuple[Any, ...]:
    fns = value if isinstance(value, (list, tuple)) else (value,)
    if not all(callable(f) for f in fns):
        raise TypeError(f"{name} must be a function or a list of functions, got {value!r}")
    return tuple(fns)


_S, _P = sampling.CHECKS, processors.CHECKS
_CONFIG = "; default: generation_config.json's, else "  # the help of a config option says so

#: Every option of ``generate``, in the order of its signature (after prompt and model).
OPTIONS: dict[str, Option] = {o.name: o for o in [
    # -- how long, and what ends a row
    Option("max_new_tokens", None, "Optional[int]", "length",
           "new tokens at most; default: generation_config.json's max_new_tokens (or its "
           f"max_length less the prompt), else {DEFAULT_MAX_NEW_TOKENS}",
           _count(0), config=True, flag=Flag("int", "N")),
    Option("max_length", None, "Optional[int]", "length",
           "HF's: prompt + new tokens at most (a batch's longest prompt), instead of "
           "max_new_tokens; default: generation_config.json's", _count(1), config=True,
           flag=Flag("int", "N")),
    Option("min_new_tokens", None, "Optional[int]", "length",
           "no end id (eos_token_id) before this many new tokens" + _CONFIG + "0",
           _P["min_new_tokens"], config=True, flag=Flag("int", "N")),
    Option("eos_token_id", None, "Union[int, Sequence[int], None]", "length",
           "the id(s) that end a row; [] for none; default: generation_config.json's, else "
           "the tokenizer's <|endoftext|>", processors.check_ids, config=True,
           flag=Flag("ids", "IDS")),
    Option("stop", None, "Union[str, Sequence[str], None]", "length",
           "text(s) that end a row, cut from the result (needs a text prompt)", _stop,
           flag=Flag("str", "TEXT", repeat=True)),
    Option("stopping_criteria", None, "Any", "length",
           "fn(ids, logits) -> bool per row, or HF StoppingCriteria: True ends the row after "
           "its token", _functions),
    Option("max_time", None, "Optional[float]", "length",
           "seconds after which every row ends (HF's MaxTimeCriteria)" + _CONFIG + "none",
           _positive, config=True, flag=Flag("float", "SECONDS")),
    Option("context", "error", "str", "length",
           "past n_ctx tokens: 'error', or 'slide' to keep the last n_ctx", _choice(CONTEXT_MODES),
           flag=Flag("choice", choices=CONTEXT_MODES)),
    # -- how a token is chosen
    Option("do_sample", None, "Optional[bool]", "sampling",
           "HF's: False is greedy, True samples; default: generation_config.json's, else "
           "temperature decides", _bool, config=True,
           flag=Flag("choice", choices=(True, False))),
    Option("temperature", None, "Optional[float]", "sampling",
           "0 is greedy; logits / T when sampling" + _CONFIG + "1.0 (0 for beam search)",
           _S["temperature"], config=True, flag=Flag("float", "T")),
    Option("top_k", None, "Optional[int]", "sampling",
           "keep the k most likely tokens (and ties)" + _CONFIG + "0 (off)", _S["top_k"],
           config=True, flag=Flag("int", "K")),
    Option("top_p", None, "Optional[float]", "sampling",
           "nucleus: keep the most likely tokens up to mass p" + _CONFIG + "1.0 (off)",
           _S["top_p"], config=True, flag=Flag("float", "P")),
    Option("top_p_rule", "hf", "str", "sampling",
           "'hf' keeps the fewest tokens whose mass reaches p; 'openai' the most whose mass "
           "stays <= p (OpenAI's src/sample.py)", _S["top_p_rule"],
           flag=Flag("choice", choices=sampling.TOP_P_RULES)),
    Option("min_p", None, "Optional[float]", "sampling",
           "keep tokens with p >= min_p * the top p" + _CONFIG + "off", _S["min_p"],
           config=True, flag=Flag("float", "P")),
    Option("typical_p", None, "Optional[float]", "sampling",
           "locally typical sampling mass" + _CONFIG + "1.0 (off)", _S["typical_p"],
           config=True, flag=Flag("float", "P")),
    Option("epsilon_cutoff", None, "Optional[float]", "sampling",
           "keep tokens with p >= epsilon" + _CONFIG + "0 (off)", _S["epsilon_cutoff"],
           config=True, flag=Flag("float", "EPS")),
    Option("eta_cutoff", None, "Optional[float]", "sampling",
           "keep tokens with p >= min(eta, sqrt(eta) e^-entropy)" + _CONFIG + "0 (off)",
           _S["eta_cutoff"], config=True, flag=Flag("float", "ETA")),
    Option("min_tokens_to_keep", 1, "int", "sampling",
           "the filters keep at least this many tokens (HF's warpers' argument)",
           _S["min_tokens_to_keep"], flag=Flag("int", "N")),
    Option("seed", None, "Union[int, np.random.Generator, None]", "sampling",
           "an int makes sampling reproducible; a Generator is used and advanced; None: "
           "fresh entropy", _seed, flag=Flag("int", "S")),
    Option("n", 1, "int", "sampling",
           "samples per prompt (one prefill), or with num_beams the n best beams", _count(1),
           flag=Flag("int", "N", names=("-n", "--num-samples"))),
    Option("num_return_sequences", None, "Optional[int]", "sampling",
           "HF's name for n" + _CONFIG + "n", _count(1), config=True),
    # -- rules that change the logits (processors), each off by default
    Option("repetition_penalty", None, "Optional[float]", "rules",
           "CTRL's penalty on every id seen, prompt included" + _CONFIG + "1.0 (off)",
           _P["repetition_penalty"], config=True, flag=Flag("float", "THETA")),
    Option("presence_penalty", 0.0, "float", "rules",
           "OpenAI's: minus A from every token generated before", _P["presence_penalty"],
           flag=Flag("float", "A")),
    Option("frequency_penalty", 0.0, "float", "rules",
           "OpenAI's: minus A for each time a token was generated before",
           _P["frequency_penalty"], flag=Flag("float", "A")),
    Option("no_repeat_ngram_size", None, "Optional[int]", "rules",
           "never repeat an N-gram of the prompt and continuation" + _CONFIG + "0 (off)",
           _P["no_repeat_ngram_size"], config=True, flag=Flag("int", "N")),
    Option("bad_words_ids", None, "Optional[Sequence[Any]]", "rules",
           "id sequences never to generate, e.g. [[15496, 995], [11]]" + _CONFIG + "none",
           _P["bad_words_ids"], config=True, flag=Flag("ids", "IDS", repeat=True)),
    Option("suppress_tokens", None, "Optional[Sequence[int]]", "rules",
           "ids never to generate" + _CONFIG + "none", _P["suppress_tokens"], config=True,
           flag=Flag("ids", "IDS")),
    Option("sequence_bias", None, "Any", "rules",
           "{(ids...): bias}: add bias to ids[-1] after ids[:-1]" + _CONFIG + "none",
           _P["sequence_bias"], config=True),
    Option("forced_eos_token_id", None, "Union[int, Sequence[int], None]", "rules",
           "the id(s) forced at the last step (max_new_tokens)" + _CONFIG + "none",
           _P["forced_eos_token_id"], config=True, flag=Flag("ids", "IDS")),
    Option("exponential_decay_length_penalty", None, "Optional[tuple[int, float]]", "rules",
           "(start, factor): after start new tokens, raise the end ids' logits by factor^k"
           + _CONFIG + "none", _P["exponential_decay_length_penalty"], config=True,
           flag=Flag("pair", "START,FACTOR")),
    Option("logits_processors", None, "Any", "rules",
           "fn(ids, logits) -> logits per row, batched(fn), or HF LogitsProcessors",
           _P["logits_processors"]),
    # -- beam search
    Option("num_beams", None, "Optional[int]", "beams",
           "beam search with this many beams" + _CONFIG + "1 (off)", _count(1), config=True,
           flag=Flag("int", "K")),
    Option("length_penalty", None, "Optional[float]", "beams",
           "beam score = sum of log-probs / length**L" + _CONFIG + "1.0", check_real,
           config=True, flag=Flag("float", "L")),
    Option("early_stopping", None, "Union[bool, str, None]", "beams",
           "when a beam search ends: True, False or 'never' (HF's)" + _CONFIG + "False",
           _early_stopping, config=True, flag=Flag("choice", choices=EARLY_STOPPING)),
    # -- what comes back
    Option("logprobs", None, "Optional[int]", "output",
           "return Completions with each token's log-prob and the k most likely alternatives",
           _count(0), flag=Flag("int", "K")),
    Option("logprobs_mode", "processed", "str", "output",
           "'processed': the distribution chosen from; 'raw': the model's own",
           _choice(LOGPROBS_MODES), flag=Flag("choice", choices=LOGPROBS_MODES)),
    Option("echo", False, "bool", "output", "the prompt before the continuation", _bool,
           flag=Flag("switch")),
    Option("stream", False, "bool", "output",
           "yield the pieces as they come (Completions with logprobs=k)", _bool),
    Option("pad_token_id", None, "Optional[int]", "output",
           "HF's: pads ragged rows for batched processors; results are not padded" + _CONFIG
           + "0", _count(0), config=True),
    Option("progress", None, "Optional[bool]", "output",
           "a bar over the tokens when not streaming; None: on a terminal or in a notebook",
           _bool),
]}  # fmt: skip

#: HF generate's arguments that gpt2np does not take, and what to do instead.
HF_UNSUPPORTED: dict[str, str] = {
    "input_ids": "pass the ids as the prompt (the first argument), or call "
    "model.hf.generate(input_ids=...), which takes HF's arguments and returns HF's "
    "outputs",
    "inputs": "pass the ids as the prompt (the first argument), or call "
    "model.hf.generate(inputs=...) for HF's conventions",
    "attention_mask": "pass the prompts as a list (gpt2np pads a ragged batch itself), or call "
    "model.hf.generate(input_ids, attention_mask=...) for HF's left padding",
    "generation_config": "set model.generation_config (a dict), or pass the options; "
    "model.hf.generate(generation_config=...) takes HF's",
    "streamer": "use stream=True, which yields the pieces",
    "output_scores": "use logprobs=k (gpt2np.Completion objects with log-probs), or "
    "model.hf.generate(..., return_dict_in_generate=True, output_scores=True) "
    "for HF's .scores",
    "output_logits": "use logprobs=k with logprobs_mode='raw', or model.hf.generate(..., "
    "return_dict_in_generate=True, output_logits=True) for HF's .logits",
    "return_dict_in_generate": "use logprobs=k (gpt2np.Completion objects), or "
    "model.hf.generate(...), which returns HF's output object",
    "output_hidden_states": "run model.trace(ids) (gpt2np.trace) on the prompt and "
    "continuation: every intermediate by name",
    "output_attentions": "run model.trace(ids, names='*attn*') (gpt2np.trace) on the prompt "
    "and continuation",
    "low_memory": "gpt2np's beam search keeps one cache of B·num_beams rows; use fewer beams",
    "cache_implementation": "gpt2np always decodes with its own preallocated KV cache",
    "renormalize_logits": "logprobs_mode='processed' reports the normalised distribution",
    "min_length": "use min_new_tokens, which counts only the new tokens (model.hf.generate "
    "takes HF's min_length)",
    "stop_strings": "use stop=, which also cuts the string from the text (HF keeps it)",
    "use_cache": "gpt2np always decodes with its KV cache",
    "bos_token_id": "an empty prompt starts from <|endoftext|> (model.eot_token)",
    "num_beam_groups": "diverse (group) beam search is not implemented",
    "diversity_penalty": "diverse (group) beam search is not implemented",
    "penalty_alpha": "contrastive search is not implemented",
    "guidance_scale": "classifier-free guidance is not implemented",
    "force_words_ids": "constrained beam search is not implemented",
    "constraints": "constrained beam search is not implemented",
    "prefix_allowed_tokens_fn": "write a logits processor that sets the other ids to -inf",
    "forced_bos_token_id": "use a logits processor, or put the token in the prompt",
    "begin_suppress_tokens": "use a logits processor (suppress_tokens applies at every step)",
    "top_h": "top-H sampling is not implemented",
    "assistant_model": "assisted decoding is not implemented",
    "prompt_lookup_num_tokens": "assisted decoding is not implemented",
    "watermarking_config": "watermarking is not implemented",
    "remove_invalid_values": "gpt2np refuses NaN and +inf logits instead",
}
#: generation_config.json's keys that change HF's generation and that gpt2np does not apply,
#: with HF's default (which changes nothing): a config that sets another value is warned about.
CONFIG_NOT_APPLIED: dict[str, Any] = {
    "min_length": 0, "num_beam_groups": 1, "diversity_penalty": 0.0, "penalty_alpha": None,
    "guidance_scale": None, "renormalize_logits": False, "forced_bos_token_id": None,
    "begin_suppress_tokens": None, "top_h": None, "remove_invalid_values": False,
    "watermarking_config": None, "encoder_repetition_penalty": 1.0,
    "encoder_no_repeat_ngram_size": 0,
}  # fmt: skip


@dataclass(frozen=True)
class Options:
    """Every option of a generation but the prompt, checked and resolved: the call's values,
    else the model's generation_config.json's, else gpt2np's defaults."""

    max_new_tokens: Optional[int]  # None: max_length less the longest prompt
    max_length: Optional[int]
    sampling: Sampling  # temperature 0: greedy
    penalties: Penalties
    seed: Any
    n: int
    stops: tuple[str, ...]
    stopping_criteria: tuple[Any, ...]
    max_time: Optional[float]
    context: str
    eos_token_id: Optional[tuple[int, ...]]  # None: the model's <|endoftext|>
    pad_token_id: int
    logprobs: Optional[int]
    logprobs_mode: str
    echo: bool
    stream: bool
    num_beams: int
    length_penalty: float
    early_stopping: Union[bool, str]
    from_config: frozenset[str] = frozenset()  # the options generation_config.json gave

    def new_tokens(self, longest: int) -> int:
        """max_new_tokens, or for max_length: what is left after the longest prompt."""
        if self.max_new_tokens is not None:
            return self.max_new_tokens
        return max(0, (self.max_length or 0) - longest)


def check_args(
    prompt: Any, config: Optional[Mapping[str, Any]] = None, **options: Any
) -> tuple[bool, bool, list[Any], Options]:
    """Every check of ``generate``'s arguments that needs no model: the one validator of the
    library and the command line.

    options: keyword arguments named in :data:`OPTIONS` (any other name is a TypeError, with a
    hint for HF's); config: the model's generation_config.json (the defaults of the options
    marked ``config``), or None before the model is known.
    -> (is_text, is_batch, prompts, options), or ValueError/TypeError naming the argument.
    """
    values, from_config = _values(options, config or {})
    is_text, is_batch, prompts = split_prompt(prompt)
    return is_text, is_batch, prompts, _resolve(values, from_config, is_text)


def _values(
    options: Mapping[str, Any], config: Mapping[str, Any]
) -> tuple[dict[str, Any], set[str]]:
    """Each option's checked value (the call's, else the config's, else the default) and the
    names taken from the config."""
    for name in options:
        if name not in OPTIONS:
            raise TypeError(unknown_argument(name))
    _warn_config(config)
    values: dict[str, Any] = {}
    from_config: set[str] = set()
    for name, option in OPTIONS.items():
        value = options.get(name, option.default)
        if value is not None or option.default is not None:  # None is "not given" if default
            values[name] = option.check(name, value)
        elif option.config and config.get(name) is not None:
            from_config.add(name)
            try:
                values[name] = option.check(name, config[name])
            except (TypeError, ValueError) as e:
                raise ValueError(f"the model's generation_config.json: {e}") from None
        else:
            values[name] = None
    return values, from_config


def unknown_argument(name: str) -> str:
    """The one-line error for a keyword argument generate does not take."""
    if name in HF_UNSUPPORTED:
        return f"generate() does not take HF's {name!r}: {HF_UNSUPPORTED[name]}"
    close = difflib.get_close_matches(name, OPTIONS, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"generate() got an unexpected keyword argument {name!r}{hint}"


def _warn_config(config: Mapping[str, Any]) -> None:
    """Warn about generation_config.json settings that change HF's generation and not gpt2np's."""
    ignored = sorted(k for k in config
                     if k in CONFIG_NOT_APPLIED and config[k] != CONFIG_NOT_APPLIED[k])  # fmt: skip
    if ignored:
        warn(f"generation_config.json sets {', '.join(ignored)}, which gpt2np does not apply")


def _resolve(values: dict[str, Any], from_config: set[str], is_text: bool) -> Options:
    """The checked values as Options, after the checks of how they combine."""

    def given(name: str) -> bool:  # by the call, not the config
        return values[name] is not None and name not in from_config

    beams = (values["num_beams"] or 1) > 1
    chosen = _sampling(values, given, beams)
    n = _n(values, given)
    stops = values["stop"] or ()
    _check_combinations(values, chosen, n, beams, bool(stops), is_text)
    rules = {name: values[name] for name in processors.CHECKS if values[name] is not None}
    max_new, max_length = _length(values, given)
    return Options(
        max_new_tokens=max_new, max_length=max_length, sampling=chosen,
        penalties=Penalties(**rules), seed=values["seed"], n=n, stops=stops,
        stopping_criteria=values["stopping_criteria"] or (), max_time=values["max_time"],
        context=values["context"], eos_token_id=values["eos_token_id"],
        pad_token_id=values["pad_token_id"] or 0, logprobs=values["logprobs"],
        logprobs_mode=values["logprobs_mode"], echo=values["echo"], stream=values["stream"],
        num_beams=values["num_beams"] or 1, length_penalty=_or(values["length_penalty"], 1.0),
        early_stopping=_or(values["early_stopping"], False), from_config=frozenset(from_config),
    )  # fmt: skip


def _or(value: Any, default: Any) -> Any:
    return default if value is None else value


def _length(values: dict[str, Any], given: Callable[[str], bool]) -> tuple[Optional[int], ...]:
    """(max_new_tokens, max_length), one of them None: the call's, else the config's, else the
    default. HF lets a config's max_new_tokens win over a call's max_length; here the call wins."""
    if given("max_new_tokens") and given("max_length"):
        raise ValueError("give max_new_tokens or max_length (which counts the prompt), not both")
    for name in ("max_new_tokens", "max_length"):
        if given(name):
            return (values[name], None) if name == "max_new_tokens" else (None, values[name])
    if values["max_new_tokens"] is not None:
        return values["max_new_tokens"], None
    if values["max_length"] is not None:
        return None, values["max_length"]
    return DEFAULT_MAX_NEW_TOKENS, None


#: The options of the sampling filters (fields of Sampling), with temperature.
_FILTERS = ("temperature", "top_k", "top_p", "min_p", "typical_p", "epsilon_cutoff",
            "eta_cutoff", "min_tokens_to_keep")  # fmt: skip


def _sampling(values: dict[str, Any], given: Callable[[str], bool], beams: bool) -> Sampling:
    """Greedy (temperature 0), or sampling with the filters. The call's do_sample or temperature
    decides over the config's; without either, temperature 1.0 (OpenAI's default)."""
    if beams:
        _check_deterministic(values, given)
        return Sampling(temperature=0.0)  # the config's sampling settings do not apply
    do_sample, t = values["do_sample"], values["temperature"]
    if given("do_sample") and given("temperature") and do_sample != (t > 0):
        raise ValueError(
            f"do_sample={do_sample} and temperature={t} disagree (temperature 0 is greedy); "
            "give one"
        )
    if given("temperature") and not given("do_sample"):
        do_sample = t > 0
    if do_sample is False:
        return Sampling(temperature=0.0)  # greedy: no filter applies, as in HF
    if t == 0 and do_sample:
        raise ValueError("do_sample=True samples, but temperature=0 is greedy; give one")
    filters = {name: values[name] for name in _FILTERS if values[name] is not None}
    return Sampling(**{"temperature": 1.0, **filters, "top_p_rule": values["top_p_rule"]})


def _check_deterministic(values: dict[str, Any], given: Callable[[str], bool]) -> None:
    """Beam search here is HF's deterministic one: the sampling arguments have no meaning
    (temperature=0, greedy beams, says what it does anyway)."""
    if values["do_sample"]:
        where = "" if given("do_sample") else " (generation_config.json's)"
        raise ValueError(
            f"do_sample=True{where} with num_beams > 1 is HF's beam sampling, which is not "
            "implemented; pass do_sample=False for beam search"
        )
    off = {**{name: getattr(Sampling(), name) for name in _FILTERS}, "temperature": 0}
    named = [n for n in (*_FILTERS, "seed") if given(n) and values[n] != off.get(n, None)]
    if named:
        raise ValueError(
            f"beam search (num_beams > 1) is deterministic; {', '.join(named)} apply to "
            "sampling (HF's beam sampling is not implemented)"
        )


def _n(values: dict[str, Any], given: Callable[[str], bool]) -> int:
    """n merged with HF's num_return_sequences (the call's, else n, else the config's)."""
    n, nrs = values["n"], values["num_return_sequences"]
    if given("num_return_sequences"):
        if n != 1 and n != nrs:
            raise ValueError(
                f"n={n} and num_return_sequences={nrs} are the same thing (OpenAI's and HF's "
                "name); give one"
            )
        return int(nrs)
    return int(n if n != 1 or nrs is None else nrs)


def _check_combinations(
    values: dict[str, Any],
    chosen: Sampling,
    n: int,
    beams: bool,
    stops: bool,
    is_text: bool,
) -> None:
    num_beams = values["num_beams"] or 1
    if beams and n > num_beams:
        raise ValueError(f"n (num_return_sequences) = {n} must be <= num_beams = {num_beams}")
    if not beams and n > 1 and chosen.greedy:
        raise ValueError(
            f"n={n} with greedy decoding (temperature=0 or do_sample=False) would give {n} "
            "identical continuations; sample, or use num_beams for the n best"
        )
    if values["stream"] and beams:
        raise ValueError("stream=True does not go with beam search: it needs the whole result")
    if beams and (stops or values["context"] != "error"):
        raise ValueError(f"beam search does not support {'stop strings' if stops else 'slide'}")
    if beams and (values["stopping_criteria"] or values["max_time"] is not None):
        raise ValueError("beam search does not support stopping_criteria or max_time")
    if stops and not is_text:
        raise ValueError("stop strings need a text prompt (the prompt here is token ids)")


def split_prompt(prompt: Any) -> tuple[bool, bool, list[Any]]:
    """-> (is_text, is_batch, prompts) or TypeError/ValueError for what cannot be a prompt.
    None is the empty text (an unconditional sample)."""
    if prompt is None:
        return True, False, [""]
    if isinstance(prompt, str):
        return True, False, [prompt]
    if isinstance(prompt, np.ndarray):
        if prompt.ndim == 2:
            if len(prompt) == 0:
                raise ValueError(f"prompt is an empty batch of ids, shape {prompt.shape}")
            return False, True, list(prompt)
        return False, False, [prompt]
    if not isinstance(prompt, (list, tuple)):
        hint = ""
        if hasattr(prompt, "__array__"):  # a torch tensor, say: HF's input_ids
            hint = (" (for HF's input_ids as a tensor, with HF's defaults and outputs, call "
                    "model.hf.generate(input_ids); or pass np.asarray(ids))")  # fmt: skip
        raise TypeError(
            f"prompt must be a str, token ids, or a list of those; got "
            f"{type(prompt).__name__}{hint}"
        )
    if len(prompt) == 0:
        raise ValueError(
            "prompt is an empty list (no prompts, or no ids?); for an unconditional sample pass "
            "None or an empty string"
        )
    if all(isinstance(p, str) for p in prompt):
        return True, True, list(prompt)
    if all(is_int(p) for p in prompt):
        return False, False, [prompt]
    if all(isinstance(p, (list, tuple, np.ndarray)) for p in prompt):
        return False, True, list(prompt)
    raise TypeError("a batch prompt must be all str or all lists of token ids, not a mix")


# -- what follows from the table: signatures and help ----------------------------------------


def signature(leading: list[inspect.Parameter]) -> inspect.Signature:
    """``leading`` parameters, then every option as a keyword-only parameter with its default
    and annotation (the annotation as the text of the table, as ``from __future__ import
    annotations`` leaves them)."""
    own = {p.name for p in leading}
    options = [
        inspect.Parameter(o.name, inspect.Parameter.KEYWORD_ONLY, default=o.default,
                          annotation=o.annotation)
        for o in OPTIONS.values() if o.name not in own
    ]  # fmt: skip
    return inspect.Signature([*leading, *options])


_GROUPS = {"length": "How long, and what ends a row", "sampling": "How a token is chosen",
           "rules": "Rules that change the logits (each off by default; "
                    "gpt2np.generation.processors)",
           "beams": "Beam search (HF's; deterministic)", "output": "What comes back"}  # fmt: skip


def describe(indent: str = "    ") -> str:
    """The options as help text, by group: one line each, name then help (with the default);
    every line after the first starts with ``indent``, the indentation of the docstring this
    is appended to (so that ``help()`` dedents them together)."""
    lines = []
    for group, title in _GROUPS.items():
        lines += ["", f"{title}:"]
        lines += [f"    {o.name}: {o.help}" for o in OPTIONS.values() if o.group == group]
    return "\n".join(indent + line if line else line for line in lines) + "\n"
