"""Sampler goldens: logits, a setting and a stream of uniform draws in; at each step the logits
after every stage of the sampler and the chosen id out, so that a port's sampler can be checked
without matching anyone's random number generator.

At step i the history is ``prompt_ids`` followed by the golden's ``chosen[:i]``, and the draw
is ``u[i]`` in [0, 1). The stages, in order (each a row of V logits, −inf where removed)::

    penalized   logits with the repetition penalty θ (CTRL's rule, as HF: for every distinct id
                j of the history, prompt included, z_j / θ if z_j > 0 else z_j · θ), then
                OpenAI's presence and frequency penalties (z_j − c_j·α_f − [c_j > 0]·α_p, c_j
                the count of j among the generated ids only)
    tempered    penalized / T                       (T = 0: greedy, the filters are skipped)
    top_k       keep the logits ≥ the k-th largest (ties with it kept); k = 0 is off
    top_p       sort descending, p = softmax; keep the entries whose mass before them
                (an exclusive cumulative sum) is < top_p, then every logit ≥ the smallest kept:
                the smallest set whose mass reaches top_p, the crossing token included
    min_p       keep the ids whose probability is ≥ min_p × the largest probability
    probs       softmax(min_p)                      (float64; removed ids exactly 0)
    chosen      the first id, in id order, whose cumulative probability exceeds u · Σ probs

These are gpt2np's rules (OpenAI's src/sample.py for top-k and top-p; HF's order and its min-p
and penalties), computed here step by step on their own, in float64, so that the golden records
each stage. :func:`dump_sampler` writes them as an aligned ``.npz`` with a manifest (the layout
of docs/golden-files.md); the comparison is :mod:`gpt2np.golden.sampler_diff`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib
from typing import Any, Optional, Union

import numpy as np

from .._version import __version__
from ..support.atomic import write_bytes
from ..support.checks import check_int
from ..support.sizes import check_bytes
from .kinds import SAMPLER_FORMAT, SUITE_INDEX
from .npy import ALIGN
from .writer import write_tensors

__all__ = [
    "STAGES",
    "SUITE",
    "SUITE_FORMAT",
    "SUITE_INDEX",
    "SUITE_VERSION",
    "Setting",
    "SuiteEntry",
    "choose",
    "distribution",
    "dump_sampler",
    "dump_sampler_suite",
    "dump_suite_entry",
    "min_p",
    "penalize",
    "reference_step",
    "synthetic_logits",
    "top_k",
    "top_p",
]

#: The stages recorded per step, in the order the sampler applies them.
STAGES = ("penalized", "tempered", "top_k", "top_p", "min_p")
#: Synthetic logits keep every filter's boundary at least this far (relative) from a tie that
#: float32 rounding could break the other way.
MARGIN = 1e-4
#: Rows drawn at most for each synthetic step before the setting is refused (a row misses the
#: margins with a probability well under one half for any setting that can be met).
MAX_DRAWS = 1000
#: The [steps, V] float64 arrays a sampler golden holds (logits, the stages, probs) and the
#: working copies of one step: what dump_sampler's size is checked against.
COPIES = len(STAGES) + 4


@dataclasses.dataclass(frozen=True)
class Setting:
    """The sampler's settings (the defaults switch everything off but temperature 1)."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0

    def __post_init__(self) -> None:
        for name in ("temperature", "top_p", "min_p", "repetition_penalty",
                     "presence_penalty", "frequency_penalty"):  # fmt: skip
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"{name} must be a number, got {value!r}")
            if not math.isfinite(value):
                raise ValueError(f"{name} must be finite, got {value}")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            raise ValueError(f"top_k must be an int >= 0, got {self.top_k!r}")
        if self.temperature < 0 or not 0 < self.top_p <= 1 or not 0 <= self.min_p <= 1:
            raise ValueError("temperature must be >= 0, top_p in (0, 1], min_p in [0, 1]")
        if self.repetition_penalty <= 0:
            raise ValueError(f"repetition_penalty must be > 0, got {self.repetition_penalty}")


def distribution(z: np.ndarray) -> np.ndarray:
    """softmax of one row of logits [V] in float64 (−inf entries get 0)."""
    top = np.max(z)
    e = np.exp(z - top) if np.isfinite(top) else np.zeros_like(z)
    out: np.ndarray = e / e.sum()
    return out


def penalize(z: np.ndarray, history: np.ndarray, n_prompt: int, s: Setting) -> np.ndarray:
    """The penalties of the module docstring on one row z [V] (a copy)."""
    z = z.copy()
    if s.repetition_penalty != 1.0 and len(history):
        seen = np.unique(history)
        z[seen] = np.where(z[seen] > 0, z[seen] / s.repetition_penalty,
                           z[seen] * s.repetition_penalty)  # fmt: skip
    generated = history[n_prompt:]
    if (s.presence_penalty or s.frequency_penalty) and len(generated):
        ids, counts = np.unique(generated, return_counts=True)
        z[ids] -= counts * s.frequency_penalty + s.presence_penalty
    return z


def top_k(z: np.ndarray, k: int) -> np.ndarray:
    if k == 0 or k >= z.size:
        return z
    kth = np.sort(z)[::-1][k - 1]
    return np.where(z < kth, -np.inf, z)


def top_p(z: np.ndarray, p: float) -> np.ndarray:
    if p >= 1.0:
        return z
    order = np.sort(z)[::-1]
    probs = distribution(order)
    before = np.cumsum(probs) - probs
    smallest = order[before < p].min()
    return np.where(z < smallest, -np.inf, z)


def min_p(z: np.ndarray, m: float) -> np.ndarray:
    if m <= 0:
        return z
    probs = distribution(z)
    return np.where(probs < m * probs.max(), -np.inf, z)


def reference_step(
    logits: np.ndarray, history: np.ndarray, n_prompt: int, s: Setting
) -> dict[str, np.ndarray]:
    """One step's stages (float64 [V] each, the module docstring's) and ``probs``."""
    z = np.asarray(logits, np.float64)
    stages = {"penalized": penalize(z, np.asarray(history, np.int64), n_prompt, s)}
    if s.temperature == 0:  # greedy: the argmax of the penalized logits, nothing is drawn
        for name in STAGES[1:]:
            stages[name] = stages["penalized"]
        probs = np.zeros_like(z)
        probs[int(np.argmax(stages["penalized"]))] = 1.0
        return {**stages, "probs": probs}
    stages["tempered"] = stages["penalized"] / s.temperature
    stages["top_k"] = top_k(stages["tempered"], s.top_k)
    stages["top_p"] = top_p(stages["top_k"], s.top_p)
    stages["min_p"] = min_p(stages["top_p"], s.min_p)
    return {**stages, "probs": distribution(stages["min_p"])}


def choose(probs: np.ndarray, u: float) -> int:
    """The first id, in id order, whose cumulative probability exceeds u · Σ probs (the last id
    with a probability when rounding puts u · Σ at the very top)."""
    cdf = np.cumsum(probs)
    i = int(np.searchsorted(cdf, u * cdf[-1], side="right"))
    return i if i < len(probs) else int(np.flatnonzero(probs)[-1])


def synthetic_logits(
    n_steps: int,
    n_vocab: int,
    s: Setting,
    seed: int = 0,
    prompt: Any = (),
    tail_mass: Optional[float] = None,
) -> np.ndarray:
    """float32-exact logits [n_steps, V] shaped like a language model's (a few likely ids, a
    long tail; the first ids of ``prompt`` among the likely, so that the repetition penalty
    matters), with a tie at the k-th largest penalized logit in step 0, and every filter's
    boundary at least :data:`MARGIN` from a rounding tie (a row that has one is drawn again).
    tail_mass: the tail shifted down to hold this share of the mass whatever V (over 50,257
    ids it holds ~90%, and top-p or min-p alone then cut it where a rounding could move them)."""
    rng = np.random.default_rng(seed)
    prompt = np.asarray(prompt, np.int64).reshape(-1)
    rows: list[np.ndarray] = []
    tries = 0  # rows drawn for this step
    while len(rows) < n_steps:
        if tries == MAX_DRAWS:
            raise ValueError(
                f"no synthetic logits over {n_vocab} ids keep every filter of {s} at least "
                f"{MARGIN:g} from a tie after {MAX_DRAWS} draws: pass logits (--logits)"
            )
        tries += 1
        z = rng.standard_normal(n_vocab) * 1.5
        likely = rng.choice(n_vocab, 12, replace=False)
        z[likely] += rng.uniform(3, 8, 12)
        z[prompt[:4]] += 6.0
        if tail_mass is not None:
            tail = np.ones(n_vocab, bool)
            tail[likely], tail[prompt[:4]] = False, False
            e = np.exp(z - z.max())
            z[tail] += np.log(tail_mass / (1 - tail_mass) * e[~tail].sum() / e[tail].sum())
        z = z.astype(np.float32).astype(np.float64)
        if not rows and 1 < s.top_k < n_vocab - 1:
            _tie(z, prompt, s)
        if _clear_margins(penalize(z, prompt, len(prompt), s), s):
            rows.append(z)
            tries = 0
    return np.stack(rows)


def _tie(z: np.ndarray, prompt: np.ndarray, s: Setting) -> None:
    """Make the k-th and (k+1)-th largest penalized logits equal (both are kept by top-k), using
    two ids outside the prompt, so that the penalties leave the tie alone."""
    order = np.argsort(-penalize(z, prompt, len(prompt), s), kind="stable")
    free = [int(i) for i in order[s.top_k - 3 : s.top_k + 3] if int(i) not in set(prompt.tolist())]
    ranked = [int(i) for i in order]
    for a, b in zip(free, free[1:]):
        if ranked.index(a) == s.top_k - 1 and ranked.index(b) == s.top_k:
            z[b] = z[a]


def _clear_margins(z: np.ndarray, s: Setting) -> bool:
    """No filter of ``s`` decides an id by less than MARGIN on this row (the tie made on
    purpose at the k-th largest is an exact tie, which every correct port keeps)."""
    t = z / (s.temperature or 1.0)
    k = top_k(t, s.top_k)
    order = np.sort(k[np.isfinite(k)])[::-1]
    probs = distribution(order)
    before = np.cumsum(probs) - probs
    # the first token's mass before it is exactly 0 < top_p: no rounding can remove it
    if s.top_p < 1 and np.min(np.abs(before[1:] - s.top_p), initial=np.inf) < MARGIN:
        return False
    if s.min_p > 0:
        kept = distribution(top_p(k, s.top_p))
        ratio = kept[kept > 0] / kept.max()
        if np.min(np.abs(ratio - s.min_p)) < MARGIN * s.min_p:
            return False
    return True


def dump_sampler(
    path: Union[str, pathlib.Path],
    setting: Optional[Setting] = None,
    logits: Any = None,
    *,
    steps: int = 8,
    n_vocab: int = 50257,
    prompt_ids: Any = None,
    seed: int = 0,
) -> dict[str, Any]:
    """Write a sampler golden file and return its manifest. logits: [steps, V] (default:
    :func:`synthetic_logits`); prompt_ids: the history before step 0 (default: 16 ids drawn
    with ``seed``, some among step 0's likely ones); the draws ``u`` come from ``seed``."""
    s = setting if setting is not None else Setting()
    if logits is not None:
        logits = np.asarray(logits)
        rows = len(logits) if logits.ndim else 1
        check_bytes(
            golden_bytes(rows, logits.size // max(rows, 1)),
            f"a sampler golden of logits {list(logits.shape)}",
        )
        logits = logits.astype(np.float64)
        if logits.ndim != 2 or not logits.size or not np.isfinite(logits).all():
            raise ValueError(f"logits must be finite [steps, V], got shape {logits.shape}")
        steps, n_vocab = logits.shape
    steps, n_vocab = check_int("steps", steps, 1), check_int("n_vocab", n_vocab, 1)
    seed = check_int("seed", seed, 0)
    check_bytes(golden_bytes(steps, n_vocab), f"a sampler golden of {steps} steps x {n_vocab} ids")
    rng = np.random.default_rng(seed + 1)
    if prompt_ids is None:
        prompt_ids = rng.choice(n_vocab, min(16, n_vocab), replace=False)
    prompt = np.asarray(prompt_ids, np.int64).reshape(-1)
    if logits is None:
        logits = synthetic_logits(steps, n_vocab, s, seed, prompt)
    if prompt.size and not (0 <= prompt.min() and prompt.max() < n_vocab):
        raise ValueError(f"prompt_ids must be in [0, {n_vocab})")
    tensors = _run(logits, prompt, rng.random(steps), s)
    manifest = {
        "format": SAMPLER_FORMAT,
        "format_version": 1,
        "gpt2np_version": __version__,
        "setting": dataclasses.asdict(s),
        "stages": list(STAGES),
        "steps": steps,
        "n_vocab": n_vocab,
        "prompt_ids": prompt.tolist(),
        "alignment": ALIGN,
        "tensors": [],
    }
    write_tensors(pathlib.Path(path), manifest, tensors)
    return manifest


def golden_bytes(steps: int, n_vocab: int) -> int:
    """What writing a sampler golden of ``steps`` x ``n_vocab`` costs in memory, at most: its
    float64 [steps, V] arrays and each step's arrays of the stages (with NumPy's ~112 bytes
    an array)."""
    return steps * (n_vocab * 8 + 112) * COPIES


def _run(logits: np.ndarray, prompt: np.ndarray, u: np.ndarray, s: Setting) -> dict[str, Any]:
    """Every step's stages, probs and choice, the history growing by the golden's choices."""
    out: dict[str, list[Any]] = {name: [] for name in (*STAGES, "probs", "chosen")}
    history = list(prompt)
    for i, row in enumerate(logits):
        with np.errstate(over="ignore", invalid="ignore"):
            step = reference_step(row, np.array(history, np.int64), len(prompt), s)
        if not (np.isfinite(step["probs"]).all() and step["probs"].sum() > 0):
            raise ValueError(
                f"logits step {i}: the penalized logits / temperature {s.temperature:g} overflow "
                "float64, so no distribution can be drawn from: scale the logits down"
            )
        for name, value in step.items():
            out[name].append(value)
        chosen = choose(step["probs"], float(u[i]))
        out["chosen"].append(chosen)
        history.append(chosen)
    tensors: dict[str, Any] = {"logits": logits, "prompt_ids": prompt, "u": u}
    tensors.update({name: np.stack(out[name]) for name in (*STAGES, "probs")})
    tensors["chosen"] = np.array(out["chosen"], np.int64)
    return tensors


# -- the suite: one golden per setting --------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SuiteEntry:
    """One setting of the sampler suite: ``name`` (also its file's stem), the ``setting``, the
    ``logits`` it is drawn on (``"synthetic"``: :func:`synthetic_logits`; ``"repeats"``: one id
    forced for the first half of the steps, then competing; ``"tie"``: a tie at the k-th largest
    where top-k and top-p do not commute; ``"peaked"``: synthetic with the tail holding 5% of
    the mass, so that top-p or min-p alone cut among the likely ids) and what a port gets wrong
    that it ``catches``."""

    name: str
    setting: Setting
    catches: str
    logits: str = "synthetic"


#: The sampler suite (``gpt2np dump-sampler --suite``): each filter and each penalty alone,
#: greedy, every option together in HF's order, generated ids that repeat, and a tied k-th
#: largest where top-k and top-p interact. The single all-filters golden lets bugs pass that
#: one of these shows (docs/golden-files.md, "The sampler suite").
SUITE: tuple[SuiteEntry, ...] = (
    SuiteEntry("greedy", Setting(temperature=0.0),
               "sampling at temperature 0, or dividing by it (greedy: the first argmax)"),
    SuiteEntry("temperature", Setting(temperature=0.7), "the temperature: z / T, not z * T"),
    SuiteEntry("top-k", Setting(top_k=40), "top-k alone, its ties at the k-th largest kept"),
    SuiteEntry("top-p", Setting(top_p=0.9),
               "top-p alone: the id whose mass crosses top_p is kept (an exclusive cumsum)",
               "peaked"),
    SuiteEntry("min-p", Setting(min_p=0.05), "min-p alone: p < min_p * max(p) removed",
               "peaked"),
    SuiteEntry("repetition", Setting(repetition_penalty=1.3),
               "the repetition penalty alone: z / theta if z > 0, else z * theta, on every id "
               "of the history, prompt included"),
    SuiteEntry("presence", Setting(presence_penalty=0.5),
               "the presence penalty alone: the generated ids only, not the prompt's"),
    SuiteEntry("frequency", Setting(frequency_penalty=0.2),
               "the frequency penalty alone: the generated ids only"),
    SuiteEntry("repeats", Setting(presence_penalty=0.3, frequency_penalty=0.4),
               "an id generated several times: the frequency penalty counts each time "
               "(c * alpha_f), the presence penalty once", "repeats"),
    SuiteEntry("top-k-tie-top-p", Setting(top_k=4, top_p=0.8),
               "a tie at the k-th largest, kept; top-k before top-p (they do not commute: "
               "top-p renormalizes over what top-k kept)", "tie"),
    SuiteEntry("hf-order", Setting(temperature=0.7, top_k=40, top_p=0.9, min_p=0.05,
                                   repetition_penalty=1.3, presence_penalty=0.5,
                                   frequency_penalty=0.2),
               "every option together in HF's order: penalties, temperature, top-k, top-p, "
               "min-p"),
)  # fmt: skip
SUITE_FORMAT = "gpt2np-sampler-suite"
#: The suite's version: it changes when a setting, its logits or the index's keys change.
SUITE_VERSION = 1
#: The smallest vocabulary the suite is written for (top-k 40 with its tie, and a tail).
SUITE_MIN_VOCAB = 64
#: The suite's constructed logits: the forced id's lead, and the tie setting's top logits.
_FORCED_LEAD = 30.0
_TIE_TOP = (5.0, 4.0, 3.0, 2.0)


def dump_sampler_suite(
    directory: Union[str, pathlib.Path], *, steps: int = 6, n_vocab: int = 50257, seed: int = 0
) -> dict[str, Any]:
    """Write one sampler golden per :data:`SUITE` entry, ``directory/NAME.npz``, and the index
    ``directory/suite.json`` (written last: ``format``, ``suite_version``, ``steps``,
    ``n_vocab``, ``seed`` and ``settings``, a list of ``{name, file, setting, catches}``).
    Return the index. steps >= 4 (the repeats setting forces an id for half of them);
    n_vocab >= 64."""
    steps = check_int("steps", steps, 4)
    n_vocab = check_int("n_vocab", n_vocab, SUITE_MIN_VOCAB)
    seed = check_int("seed", seed, 0)
    check_bytes(golden_bytes(steps, n_vocab), f"a sampler golden of {steps} steps x {n_vocab} ids")
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / SUITE_INDEX).unlink(missing_ok=True)  # no index over a half-written suite
    settings = []
    for entry in SUITE:
        path = directory / f"{entry.name}.npz"
        dump_suite_entry(path, entry, steps=steps, n_vocab=n_vocab, seed=seed)
        settings.append({"name": entry.name, "file": path.name, "logits": entry.logits,
                         "setting": dataclasses.asdict(entry.setting),
                         "catches": entry.catches})  # fmt: skip
    index = {
        "format": SUITE_FORMAT,
        "suite_version": SUITE_VERSION,
        "gpt2np_version": __version__,
        "steps": steps,
        "n_vocab": n_vocab,
        "seed": seed,
        "settings": settings,
    }
    write_bytes(directory / SUITE_INDEX, json.dumps(index, indent=1) + "\n")
    return index


def dump_suite_entry(
    path: Union[str, pathlib.Path], entry: SuiteEntry, *, steps: int, n_vocab: int, seed: int = 0
) -> dict[str, Any]:
    """Write the golden of one :data:`SUITE` entry to ``path`` (as :func:`dump_sampler_suite`
    writes it, on the entry's logits); return its manifest."""
    prompt = np.random.default_rng(seed + 1).choice(n_vocab, 16, replace=False)
    if entry.logits == "synthetic":  # the file `dump-sampler` writes for this setting
        return dump_sampler(path, entry.setting, steps=steps, n_vocab=n_vocab, seed=seed)
    if entry.logits == "peaked":
        logits = synthetic_logits(steps, n_vocab, entry.setting, seed, prompt, 0.05)
    else:
        build = _repeat_logits if entry.logits == "repeats" else _tie_logits
        logits = build(steps, n_vocab, prompt, np.random.default_rng(seed))
    return dump_sampler(path, entry.setting, logits, prompt_ids=prompt, seed=seed)


def _tail(n_vocab: int, rng: np.random.Generator) -> np.ndarray:
    """A language model's long tail and a few likely ids, as in :func:`synthetic_logits`."""
    z = rng.standard_normal(n_vocab) * 1.5
    z[rng.choice(n_vocab, 12, replace=False)] += rng.uniform(3, 8, 12)
    return z


def _free_ids(n_vocab: int, prompt: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """n distinct ids outside the prompt."""
    free = np.setdiff1d(np.arange(n_vocab), prompt)
    return rng.choice(free, n, replace=False)


def _repeat_logits(
    steps: int, n_vocab: int, prompt: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """One id R outside the prompt leads by 30 in the first half of the steps, so it is chosen
    at each (its probability is 1 − ~V·e⁻²⁸ after any penalty of the suite); in the second half
    it is level with the most likely other id before the penalties, so the penalty of its count
    c decides how likely it is (c · α_f against a port's 1 · α_f)."""
    (r,) = _free_ids(n_vocab, prompt, 1, rng)
    rows = []
    for i in range(steps):
        z = _tail(n_vocab, rng)
        others = np.delete(z, r)
        z[r] = others.max() + (_FORCED_LEAD if i < steps // 2 else 1.0)
        rows.append(z)
    return np.stack(rows).astype(np.float32).astype(np.float64)


def _tie_logits(
    steps: int, n_vocab: int, prompt: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """Top logits 5, 4, 3, 2, 2 (+ a shift per step) on ids outside the prompt: a tie at the
    4th largest, both kept by top-k 4; within those five, top-p 0.8 keeps two (masses 0.62,
    0.23, ...). A tail holding 30% of the mass follows, so top-p run first, on the whole
    distribution, keeps five or more, and top-k then keeps the five."""
    rows = []
    for _ in range(steps):
        top = np.array([*_TIE_TOP, _TIE_TOP[-1]]) + rng.uniform(-0.2, 0.2)
        mass = np.exp(top).sum()
        z = np.log(0.43 * mass / (n_vocab - 5)) + rng.uniform(-0.5, 0.5, n_vocab)
        z[_free_ids(n_vocab, prompt, 5, rng)] = top
        rows.append(z)
    return np.stack(rows).astype(np.float32).astype(np.float64)
