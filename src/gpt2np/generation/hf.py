"""HF transformers' ``generate`` as it is called: ``model.hf.generate(input_ids, ...)``.

Code written for ``transformers.GPT2LMHeadModel.generate`` runs here unchanged, with HF's
conventions where gpt2np's own :meth:`gpt2np.GPT2.generate` has OpenAI's:

====================  =========================================  ==============================
                      ``model.hf.generate``                      ``model.generate``
====================  =========================================  ==============================
default decoding      greedy; ``do_sample=True`` samples with    samples at temperature 1 from
                      ``top_k=50`` (HF's GenerationConfig)        the whole vocabulary (OpenAI)
default length        20 new tokens (transformers 5), at most    50 new tokens
                      n_ctx in all
input                 ids [B, T] or [T]: a list, a NumPy array,  text, ids or a list of them
                      a torch tensor (``np.asarray``; torch is
                      never imported), ``attention_mask`` for
                      left padding
output                int64 [B·n, T + N]: the prompt, then the   the continuation: text or ids
                      new tokens, ``pad_token_id`` after a row
                      ends; or with ``return_dict_in_generate``
                      an :class:`HFGenerateOutput`
====================  =========================================  ==============================

The defaults are HF's GenerationConfig's (:data:`HF_DEFAULTS`), then the model's
``generation_config.json`` (``model.generation_config``), then the call. The maths is
gpt2np's own: the logit rules of :mod:`gpt2np.generation.processors`, the filters of
:mod:`gpt2np.generation.sampling`, beam search (:mod:`gpt2np.generation.beam`), checked by
:func:`gpt2np.generation.options.check_args`; this module maps HF's arguments onto them and runs
HF's decoding loop over the in-place cache:

    scores_t = warp(process(ids, logits_t))        process: the rules, warp: temperature, top-k…
    token_t  = argmax(scores_t) | a draw from softmax(scores_t); pad_token_id once a row ended
    a row ends after an eos_token_id, a stopping criterion, or max_time; all rows: the loop ends

As in HF, a row that has ended goes on through the model with ``pad_token_id`` fed (its scores
are still computed and reported), the logit rules see the padded ids (HF's ``input_ids``)
except the repetition penalty, which skips the left padding (transformers >= 5), and
``max_length``/``min_length`` count the padded prompt. Without ``pad_token_id`` (GPT-2 has
none) the first eos id pads, as HF does, without HF's warning.

Sampling draws from NumPy (``seed=``, gpt2np's: an int or a Generator, as in
``model.generate``), so sampled ids are not torch's; the distributions (``output_scores``) are
HF's. What HF's ``generate`` takes and this does not is refused by name, with what to use
instead (:data:`HF_REFUSED`).
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Literal, Optional, Union, overload

import numpy as np

from ..golden.trace import trace
from . import loop
from . import options as options_module
from .beam import beam_search
from .processors import Penalties, call_batched, form_of
from .sampling import check_logits

if TYPE_CHECKING:
    from ..runtime import Runtime

__all__ = ["HF", "HF_DEFAULTS", "HF_REFUSED", "HFGenerateOutput"]

#: HF GenerationConfig's defaults of the arguments model.hf.generate takes (what a call and the
#: model's generation_config.json leave out).
HF_DEFAULTS: dict[str, Any] = {
    "max_length": None, "max_new_tokens": None, "min_length": 0, "min_new_tokens": None,
    "early_stopping": False, "max_time": None, "do_sample": False, "num_beams": 1,
    "temperature": 1.0, "top_k": 50, "top_p": 1.0, "min_p": None, "typical_p": 1.0,
    "epsilon_cutoff": 0.0, "eta_cutoff": 0.0, "repetition_penalty": 1.0, "length_penalty": 1.0,
    "no_repeat_ngram_size": 0, "bad_words_ids": None, "suppress_tokens": None,
    "sequence_bias": None, "forced_eos_token_id": None, "exponential_decay_length_penalty": None,
    "num_return_sequences": 1, "output_scores": False, "output_logits": False,
    "return_dict_in_generate": False, "output_hidden_states": False,
    "output_attentions": False, "pad_token_id": None, "eos_token_id": None,
    "bos_token_id": None, "use_cache": True, "logits_processor": None,
    "stopping_criteria": None, "seed": None,
}  # fmt: skip

#: HF's arguments that model.hf.generate does not take, with the value that changes nothing
#: (accepted; ``_ANY`` for none) and what to use instead.
_ANY = object()
HF_REFUSED: dict[str, tuple[Any, str]] = {
    "streamer": (None, "use model.generate(..., stream=True), which yields the pieces"),
    "low_memory": (None, "gpt2np's beam search keeps one KV cache of B·num_beams rows; "
                         "use a smaller num_beams or batch"),
    "cache_implementation": (None, "gpt2np always decodes with its own preallocated KV cache "
                                   "(model.new_cache)"),
    "cache_config": (None, "gpt2np always decodes with its own preallocated KV cache"),
    "past_key_values": (None, "use model.forward_cached with model.new_cache()"),
    "assistant_model": (None, "assisted decoding is not implemented; use model.hf.generate "
                              "without it"),
    "assistant_tokenizer": (None, "assisted decoding is not implemented"),
    "prompt_lookup_num_tokens": (None, "assisted decoding is not implemented"),
    "num_beam_groups": (1, "diverse (group) beam search is not implemented; use num_beams"),
    "diversity_penalty": (0.0, "diverse (group) beam search is not implemented"),
    "penalty_alpha": (None, "contrastive search is not implemented"),
    "dola_layers": (None, "DoLa decoding is not implemented"),
    "guidance_scale": (None, "classifier-free guidance is not implemented"),
    "negative_prompt_ids": (None, "classifier-free guidance is not implemented"),
    "force_words_ids": (None, "constrained beam search is not implemented"),
    "constraints": (None, "constrained beam search is not implemented"),
    "prefix_allowed_tokens_fn": (None, "pass logits_processor=[...] that sets the other ids "
                                       "to -inf"),
    "forced_bos_token_id": (None, "put the token in input_ids"),
    "begin_suppress_tokens": (None, "pass a logits_processor (suppress_tokens applies at "
                                    "every step)"),
    "top_h": (None, "top-H sampling is not implemented"),
    "watermarking_config": (None, "watermarking is not implemented"),
    "renormalize_logits": (False, "model.generate(..., logprobs=k) reports the normalised "
                                  "distribution"),
    "remove_invalid_values": (False, "gpt2np refuses NaN and +inf logits instead"),
    "stop_strings": (None, "model.generate(text, stop=...) ends rows at strings"),
    "tokenizer": (None, "model.generate(text, stop=...) ends rows at strings"),
    "encoder_repetition_penalty": (1.0, "GPT-2 has no encoder"),
    "encoder_no_repeat_ngram_size": (0, "GPT-2 has no encoder"),
    "inputs_embeds": (None, "pass input_ids"),
    "position_ids": (None, "left padding and attention_mask give the positions"),
    "token_type_ids": (None, "gpt2np's GPT-2 has no token types"),
    "synced_gpus": (_ANY, "gpt2np runs on one CPU process"),
    "use_model_defaults": (True, "the model's generation_config.json always gives the "
                                 "defaults; pass the arguments to override them"),
    "return_legacy_cache": (_ANY, "gpt2np returns no cache"),
    "compile_config": (None, "gpt2np does not compile"),
    "disable_compile": (_ANY, "gpt2np does not compile"),
    "custom_generate": (None, "write the loop with model.forward_cached and model.new_cache"),
    "trust_remote_code": (None, "gpt2np runs no remote code"),
}  # fmt: skip

#: generation_config.json keys that are not generation settings.
_CONFIG_META = {"transformers_version", "_from_model_config", "decoder_start_token_id"}


@dataclasses.dataclass
class HFGenerateOutput:
    """What ``model.hf.generate(..., return_dict_in_generate=True)`` returns: HF's
    ``GenerateDecoderOnlyOutput`` (``GenerateBeamDecoderOnlyOutput`` for beams) as NumPy.

    sequences: int64 [B·n, T + N], the prompts (as given, padding included) then the new tokens;
    scores: with ``output_scores``, one float32 [B·n, V] per step: the processed scores the token
    was chosen from (after the logit rules and, when sampling, temperature and the filters; −∞
    for what they removed); logits: with ``output_logits``, one float32 [B·n, V] per step: the
    model's raw logits; hidden_states, attentions: with ``output_hidden_states`` /
    ``output_attentions`` (unpadded input_ids), per step a tuple over layers in HF's nesting,
    from :func:`gpt2np.golden.trace.trace` (``_Traced``). ``out["sequences"]``, ``out.keys()``
    and ``out[0]`` work as in HF.
    """

    sequences: np.ndarray
    scores: Optional[tuple[np.ndarray, ...]] = None
    logits: Optional[tuple[np.ndarray, ...]] = None
    attentions: Optional[tuple[tuple[np.ndarray, ...], ...]] = None
    hidden_states: Optional[tuple[tuple[np.ndarray, ...], ...]] = None
    past_key_values: None = None

    def keys(self) -> list[str]:
        """The fields that are set, in order (HF's ModelOutput leaves out the None ones)."""
        return [f.name for f in dataclasses.fields(self) if getattr(self, f.name) is not None]

    def __getitem__(self, key: Union[str, int]) -> Any:
        if isinstance(key, str):
            if key not in self.keys():
                raise KeyError(key)
            return getattr(self, key)
        return getattr(self, self.keys()[key])

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())


class HF:
    """HF transformers' calling conventions for a gpt2np model: ``model.hf``."""

    def __init__(self, model: Runtime) -> None:
        self.model = model

    def __repr__(self) -> str:
        return f"<HF-compatible generate of {type(self.model).__name__}>"

    @overload
    def generate(
        self,
        input_ids: Any = ...,
        attention_mask: Any = ...,
        *,
        return_dict_in_generate: Literal[True],
        **kwargs: Any,
    ) -> HFGenerateOutput: ...

    @overload
    def generate(
        self,
        input_ids: Any = ...,
        attention_mask: Any = ...,
        *,
        return_dict_in_generate: Literal[False] = ...,
        **kwargs: Any,
    ) -> np.ndarray: ...

    def generate(
        self, input_ids: Any = None, attention_mask: Any = None, **kwargs: Any
    ) -> Union[np.ndarray, HFGenerateOutput]:
        """``transformers``' ``model.generate`` with HF's defaults, inputs and outputs (the
        module docstring): input_ids [B, T] or [T] (any array-like of ints; HF's ``inputs=``
        too; None: one row of ``bos_token_id``), attention_mask [B, T] of 0s then 1s (left
        padding). -> int64 [B·n, T + N], or an :class:`HFGenerateOutput` with
        ``return_dict_in_generate=True``.

        Takes HF's generation arguments whose maths gpt2np has (:data:`HF_DEFAULTS`), HF's
        ``generation_config=`` (a GenerationConfig or a dict), and gpt2np's ``seed``. Anything
        else is a TypeError or ValueError naming it, with what to use instead.
        """
        return _generate(self.model, input_ids, attention_mask, kwargs)


def _settings(model: Runtime, kwargs: dict[str, Any]) -> dict[str, Any]:
    """HF's defaults, then the model's generation_config.json, then generation_config=, then
    the call's arguments: checked names, one dict."""
    config = dict(getattr(model, "generation_config", None) or {})
    given = kwargs.pop("generation_config", None)
    if given is not None:
        if hasattr(given, "to_diff_dict"):  # an HF GenerationConfig: what it sets
            given = given.to_diff_dict()
        if not isinstance(given, Mapping):
            raise TypeError(
                "generation_config must be a transformers GenerationConfig or a dict, got "
                f"{type(given).__name__}"
            )
    for source, where in ((config, "the model's generation_config.json"),
                          (dict(given or {}), "generation_config"), (kwargs, None)):  # fmt: skip
        _check_names(source, where)
    return {**HF_DEFAULTS, **_known(config), **_known(dict(given or {})), **kwargs}


def _known(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The settings model.hf.generate applies (a config's other keys change nothing)."""
    return {k: v for k, v in settings.items() if k in HF_DEFAULTS}


def _check_names(source: Mapping[str, Any], where: Optional[str]) -> None:
    """Refuse what model.hf.generate does not take; a config's keys that change nothing pass."""
    for name, value in source.items():
        if name in HF_DEFAULTS or (where is not None and name in _CONFIG_META):
            continue
        if name in HF_REFUSED:
            harmless, instead = HF_REFUSED[name]
            if harmless is _ANY or _same(value, harmless):
                continue
            said = f"{where}'s " if where else ""
            raise ValueError(
                f"model.hf.generate does not support {said}{name}={value!r}: {instead}"
            )
        if where is not None:  # a config key HF has and gpt2np does not know: changes nothing?
            if name in options_module.CONFIG_NOT_APPLIED:
                if _same(value, options_module.CONFIG_NOT_APPLIED[name]):
                    continue
                raise ValueError(f"model.hf.generate does not support {where}'s {name}={value!r}")
            continue
        close = difflib.get_close_matches(name, [*HF_DEFAULTS, *HF_REFUSED], n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise TypeError(f"model.hf.generate() got an unexpected keyword argument {name!r}{hint}")


def _same(value: Any, harmless: Any) -> bool:
    try:
        return value is harmless or (type(value) is type(harmless) and bool(value == harmless))
    except Exception:  # an array or a tensor: not the harmless default
        return False


def _inputs(
    model: Runtime, input_ids: Any, attention_mask: Any, s: dict[str, Any]
) -> tuple[np.ndarray, np.ndarray]:
    """(ids int64 [B, T], pad int64 [B]: each row's left padding), checked. Ids within the
    padding may be anything (HF's pad_token_id); the others must be in the vocabulary."""
    if input_ids is None:
        bos = s["bos_token_id"] if s["bos_token_id"] is not None else model.eot_token
        if bos is None:
            raise ValueError("input_ids=None starts from bos_token_id, which this model lacks")
        input_ids = [[bos]]
    ids = _int_array("input_ids", input_ids)
    if ids.shape[1] == 0:
        raise ValueError("input_ids has no tokens (T = 0); pass input_ids=None to start from "
                         "bos_token_id")  # fmt: skip
    if attention_mask is None:
        mask = _default_mask(ids, s)
    else:
        mask = _int_array("attention_mask", attention_mask)
        if mask.shape != ids.shape:
            raise ValueError(f"attention_mask has shape {mask.shape}, input_ids {ids.shape}")
    if not np.isin(mask, (0, 1)).all():
        raise ValueError("attention_mask must hold 0s and 1s")
    lengths = mask.sum(axis=1)
    pad = ids.shape[1] - lengths
    left = np.arange(ids.shape[1])[None, :] >= pad[:, None]  # [B, T]: the mask of left padding
    if (lengths == 0).any() or not (mask.astype(bool) == left).all():
        raise ValueError(
            "attention_mask must be left padding (each row 0s, then at least one 1), as HF's "
            "tokenizers give with padding_side='left'; gpt2np masks only a left pad"
        )
    model.check_ids(np.where(left, ids, 0))  # in the vocabulary, the padding aside
    return ids, pad.astype(np.int64)


def _int_array(name: str, value: Any) -> np.ndarray:
    """An array-like of ints [T] or [B, T] (a torch tensor through ``__array__``) -> [B, T]."""
    if isinstance(value, (str, bytes)):
        raise TypeError(f"{name} must be token ids; encode text with model.tokenizer first")
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError, RuntimeError) as e:
        raise TypeError(f"{name} must be an array-like of ints [B, T] or [T]: {e}") from None
    if arr.dtype == bool or arr.size == 0:  # np.asarray([[]]) is float64
        arr = arr.astype(np.int64)
    if not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name} must hold integers, got dtype {arr.dtype}")
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[0] == 0:
        raise ValueError(f"{name} must be [B, T] or [T] with B >= 1, got shape {arr.shape}")
    return arr.astype(np.int64)


def _default_mask(ids: np.ndarray, s: dict[str, Any]) -> np.ndarray:
    """HF's attention mask when none is given: ids != pad_token_id where the pad is given, is
    in the ids and is no eos id; else all ones."""
    pad, eos = s["pad_token_id"], _eos_list(s["eos_token_id"])
    if pad is not None and pad not in eos and (ids == pad).any():
        mask: np.ndarray = (ids != pad).astype(np.int64)
        return mask
    return np.ones_like(ids)


def _eos_list(eos: Any) -> list[int]:
    if eos is None:
        return []
    return [int(eos)] if np.ndim(eos) == 0 else [int(e) for e in np.asarray(eos).ravel()]


#: New tokens when neither max_new_tokens nor max_length is set (transformers 5: 20 new tokens,
#: at most n_positions in all; transformers 4 counted the prompt in these 20).
DEFAULT_NEW_TOKENS = 20


def _new_tokens(s: dict[str, Any], T: int, n_ctx: int) -> int:
    """HF's length rule: max_new_tokens if set, else max_length (counting the padded prompt),
    else 20 new tokens within n_ctx positions."""
    if s["max_new_tokens"] is not None:
        max_length = s["max_new_tokens"] + T
    elif s["max_length"] is not None:
        max_length = s["max_length"]
    else:
        max_length = min(T + DEFAULT_NEW_TOKENS, n_ctx)
    if T >= max_length:
        raise ValueError(
            f"Input length of input_ids is {T}, but max_length is set to {max_length}; "
            "increase max_length or, better, set max_new_tokens"
        )
    new = int(max_length - T)
    if T + new - 1 > n_ctx:
        raise ValueError(
            f"input_ids of {T} positions + {new} new tokens exceed the model's n_ctx={n_ctx} "
            f"(at most {n_ctx - T + 1} new tokens fit)"
        )
    return new


#: HF's arguments passed on to gpt2np's options as they are (the same name and maths).
_RULES = ("repetition_penalty", "no_repeat_ngram_size", "bad_words_ids", "suppress_tokens",
          "sequence_bias", "forced_eos_token_id", "exponential_decay_length_penalty",
          "length_penalty", "early_stopping")  # fmt: skip


def _options(s: dict[str, Any], new: int, T: int, eos: list[int], pad: int) -> Any:
    """HF's settings as gpt2np's checked :class:`gpt2np.generation.options.Options`."""
    for flag in ("do_sample", "output_scores", "output_logits", "return_dict_in_generate",
                 "output_hidden_states", "output_attentions", "use_cache"):  # fmt: skip
        if not isinstance(s[flag], (bool, np.bool_)):
            raise TypeError(f"{flag} must be True or False, got {s[flag]!r}")
    min_new = s["min_new_tokens"]  # HF: min_new_tokens wins over min_length
    if min_new is None:
        min_new = max(0, (s["min_length"] or 0) - T)
    gp: dict[str, Any] = dict(
        max_new_tokens=new, do_sample=bool(s["do_sample"]), num_beams=s["num_beams"],
        num_return_sequences=s["num_return_sequences"], eos_token_id=eos, pad_token_id=pad,
        min_new_tokens=min_new, seed=s["seed"],
    )  # fmt: skip
    if s["do_sample"]:
        gp.update({k: s[k] for k in ("temperature", "top_k", "top_p", "min_p", "typical_p",
                                     "epsilon_cutoff", "eta_cutoff")})  # fmt: skip
    for name in _RULES:
        gp[name] = s[name]
    if s["bad_words_ids"] is not None:  # HF drops a ban of an eos id alone
        banned = [
            w for w in s["bad_words_ids"] if not (np.ndim(w) == 1 and list(w) in [[e] for e in eos])
        ]
        gp["bad_words_ids"] = banned or None
    if s["logits_processor"]:
        gp["logits_processors"] = list(s["logits_processor"])
    if s["sequence_bias"] is not None and isinstance(s["sequence_bias"], list):
        gp["sequence_bias"] = {tuple(k): v for k, v in s["sequence_bias"]}  # HF's list form
    _, _, _, opts = options_module.check_args([[0]], None, **gp)
    return opts


def _generate(
    model: Runtime, input_ids: Any, attention_mask: Any, kwargs: dict[str, Any]
) -> Union[np.ndarray, HFGenerateOutput]:
    kwargs = dict(kwargs)
    if "inputs" in kwargs:
        if input_ids is not None:
            raise TypeError("give input_ids or inputs (HF's name for the same), not both")
        input_ids = kwargs.pop("inputs")
    s = _settings(model, kwargs)
    eos = _eos_list(s["eos_token_id"])
    if s["eos_token_id"] is None and "eos_token_id" not in model.generation_config:
        eos = [] if model.eot_token is None else [int(model.eot_token)]
    ids, pad = _inputs(model, input_ids, attention_mask, {**s, "eos_token_id": eos})
    B, T = ids.shape
    pad_id = s["pad_token_id"] if s["pad_token_id"] is not None else eos[0] if eos else 0
    new = _new_tokens(s, T, model.hparams.n_ctx)
    opts = _options(s, new, T, eos, int(pad_id))
    opts.penalties.check_vocab(model.hparams.n_vocab)
    for e in eos:
        if not 0 <= e < model.hparams.n_vocab:
            raise ValueError(f"eos_token_id {e} is outside the vocabulary")
    want_scores, want_logits, want_hidden, want_attentions = (
        bool(s["return_dict_in_generate"] and s[name])
        for name in ("output_scores", "output_logits", "output_hidden_states",
                     "output_attentions")
    )  # fmt: skip
    if opts.num_beams > 1:
        if want_scores or want_logits or want_hidden or want_attentions:
            raise ValueError(
                "output_scores/output_logits/output_hidden_states/output_attentions with "
                "num_beams > 1 (HF's beam outputs) are not supported; use "
                "model.generate(..., num_beams=k, logprobs=k) for each beam's log-probs and "
                "score, and model.trace(out) for its intermediates"
            )
        if opts.penalties.repetition_penalty != 1.0 and pad.any():
            raise ValueError(
                "repetition_penalty with beams and a left-padded batch is not supported (HF "
                "skips the padding there); generate the rows one by one"
            )
        cache = model.new_cache(B, T + new - 1, pad=pad)
        first = model.forward_cached(np.where(_real(pad, T), ids, 0), cache, last_only=True)
        sequences = _beams(model, cache, first[:, 0], ids, opts, new, eos, int(pad_id))
        return HFGenerateOutput(sequences) if s["return_dict_in_generate"] else sequences
    if want_hidden or want_attentions:
        if pad.any():
            raise ValueError(
                "output_hidden_states/output_attentions of a left-padded batch are not "
                "supported (gpt2np.trace has no attention mask); generate the rows one by one"
            )
        stepper: Any = _Traced(model, np.repeat(ids, opts.n, axis=0), want_hidden,
                               want_attentions)  # fmt: skip
    else:
        stepper = _Cached(model, ids, pad, new, opts.n)
    sequences, scores, raws = _decode(stepper, ids, pad, opts, new, eos, int(pad_id), s,
                                      want_scores or want_logits)  # fmt: skip
    if not s["return_dict_in_generate"]:
        return sequences
    return HFGenerateOutput(
        sequences, tuple(scores) if want_scores else None, tuple(raws) if want_logits else None,
        attentions=tuple(stepper.attentions) if want_attentions else None,
        hidden_states=tuple(stepper.hidden) if want_hidden else None,
    )  # fmt: skip


def _real(pad: np.ndarray, T: int) -> np.ndarray:
    """bool [B, T]: the positions after each row's left padding."""
    return np.arange(T)[None, :] >= pad[:, None]


class _Cached:
    """The model as the decode loop runs it: gpt2np's in-place cache, prefilled once per
    prompt and copied for its n rows.  ``first``: the prompts' last logits [B·n, V]."""

    def __init__(self, model: Runtime, ids: np.ndarray, pad: np.ndarray, new: int, n: int):
        B, T = ids.shape
        self.model, self.cache = model, model.new_cache(B, T + new - 1, pad=pad)
        real = np.where(_real(pad, T), ids, 0)  # the padding is masked: any id in the vocabulary
        first = model.forward_cached(real, self.cache, last_only=True)[:, 0]  # [B, V]
        if n > 1:
            self.cache.reorder(np.repeat(np.arange(B), n))
            first = np.repeat(first, n, axis=0)
        self.first: np.ndarray = first

    def feed(self, token: np.ndarray) -> np.ndarray:
        """token int64 [R] -> next logits [R, V]"""
        return self.model.forward_cached(token[:, None], self.cache, last_only=True)[:, 0]


class _Traced:
    """The model run by :func:`gpt2np.golden.trace.trace` (the clear path), keeping what HF's
    ``output_hidden_states`` and ``output_attentions`` return, one tuple per step:

        hidden_states[t] = (embed.sum, h0.out, …, h{L-2}.out, ln_f)     each [R, T_t, D]
        attentions[t]    = (h0.attn.probs, …, h{L-1}.attn.probs)        each [R, H, T_t, S_t]

    (T_0 = the prompt's length, then 1; S_t the positions so far). HF's last hidden state is
    after the final LayerNorm, as here."""

    def __init__(self, model: Runtime, ids: np.ndarray, hidden: bool, attentions: bool):
        L = model.hparams.n_layer
        self.hidden_names = ["embed.sum", *[f"h{i}.out" for i in range(L - 1)], "ln_f"]
        self.attention_names = [f"h{i}.attn.probs" for i in range(L)]
        self.want = (hidden, attentions)
        self.names = self.hidden_names * hidden + self.attention_names * attentions
        self.model = model
        self.past: Optional[np.ndarray] = None
        self.hidden: list[tuple[np.ndarray, ...]] = []
        self.attentions: list[tuple[np.ndarray, ...]] = []
        self.first = self._run(ids)

    def _run(self, ids: np.ndarray) -> np.ndarray:
        t = trace(self.model, ids, past=self.past, names=self.names)
        self.past = t.present if self.past is None else np.concatenate([self.past, t.present], -2)
        if self.want[0]:
            self.hidden.append(tuple(t[name] for name in self.hidden_names))
        if self.want[1]:
            self.attentions.append(tuple(t[name] for name in self.attention_names))
        last: np.ndarray = t.logits[:, -1]
        return last

    def feed(self, token: np.ndarray) -> np.ndarray:
        """token int64 [R] -> next logits [R, V]"""
        return self._run(token[:, None])


def _decode(stepper: Any, ids: np.ndarray, pad: np.ndarray, opts: Any, new: int,
            eos: list[int], pad_id: int, s: dict[str, Any],
            record: bool) -> tuple[np.ndarray, list[np.ndarray], list[np.ndarray]]:  # fmt: skip
    """HF's greedy/sampling loop. -> (sequences [R, T + N], scores and raw logits per step)."""
    n, T = opts.n, ids.shape[1]
    logits = stepper.first
    ids, pad = np.repeat(ids, n, axis=0), np.repeat(pad, n)
    seqs, R = ids, len(ids)
    rngs = loop.row_generators(opts.seed, R // n, n)
    sampling = opts.sampling
    p = opts.penalties
    # HF's order, with the repetition penalty on the ids after the left padding (HF >= 5)
    rules = [(Penalties(sequence_bias=p.sequence_bias), False),
             (Penalties(repetition_penalty=p.repetition_penalty), True),
             (dataclasses.replace(p, sequence_bias=(), repetition_penalty=1.0), False)]  # fmt: skip
    criteria = [(fn, form_of(fn, loop.HF_CRITERIA_BASES)) for fn in s["stopping_criteria"] or ()]
    unfinished = np.ones(R, dtype=bool)
    scores: list[np.ndarray] = []
    raws: list[np.ndarray] = []
    started = loop.clock()
    for step in range(new):
        z = logits.astype(np.float64)
        for rule, unpadded in rules:
            if rule.active:
                rows = [row[pad[r] :] if unpadded else row for r, row in enumerate(seqs)]
                starts = [T - pad[r] if unpadded else T for r in range(R)]
                z = rule.apply(z, rows, starts, eos, new, pad_id)
        z = check_logits(z)
        if sampling.greedy:
            shown = z
        else:
            kept = np.isfinite(sampling.filter(z))
            shown = np.where(kept, z / sampling.temperature, -np.inf)  # HF's warped scores
        token = sampling.sample(z, rngs)
        token = np.where(unfinished, token, pad_id)
        seqs = np.concatenate([seqs, token[:, None]], axis=1)
        if record:
            scores.append(shown.astype(np.float32))
            raws.append(np.array(logits, dtype=np.float32))
        unfinished &= ~np.isin(token, eos)
        for fn, form in criteria:
            rows = list(seqs)
            said = ([bool(fn(r, sc)) for r, sc in zip(rows, shown)] if form == "row"
                    else call_batched(fn, form, rows, shown, pad_id))  # fmt: skip
            unfinished &= ~np.broadcast_to(np.asarray(said, dtype=bool), unfinished.shape)
        if s["max_time"] is not None and loop.clock() - started > s["max_time"]:
            unfinished[:] = False
        if step == new - 1 or not unfinished.any():
            break
        logits = stepper.feed(token)
    return seqs.astype(np.int64), scores, raws


def _beams(model: Runtime, cache: Any, logits: np.ndarray, ids: np.ndarray, opts: Any,
           new: int, eos: list[int], pad_id: int) -> np.ndarray:  # fmt: skip
    """HF's beam search (gpt2np's :func:`gpt2np.generation.beam.beam_search`): the n best of
    each prompt after its padded ids, an eos id kept, padded with pad_id to the longest."""
    found = beam_search(
        model, cache, logits, [list(map(int, row)) for row in ids], num_beams=opts.num_beams,
        max_new_tokens=new, length_penalty=opts.length_penalty,
        early_stopping=opts.early_stopping, num_return=opts.n, penalties=opts.penalties,
        ends=eos, pad_token_id=pad_id,
    )  # fmt: skip
    rows = []
    for b, hypotheses in enumerate(found):
        for h in hypotheses:
            end = [h.end_id] if h.eot and h.end_id is not None else []
            rows.append(list(ids[b]) + h.ids + end)
    width = max(len(r) for r in rows)
    out = np.full((len(rows), width), pad_id, dtype=np.int64)
    for r, row in enumerate(rows):
        out[r, : len(row)] = row
    return out
