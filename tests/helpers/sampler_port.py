"""A sampler port with switchable bugs, for the sampler suite's tests (tests/golden/
test_sampler_suite.py).

Written the way a port author writes a sampler (loops over the history, sort, softmax, cumulative
sum, in float32), independently of gpt2np's code, and fed a sampler golden's logits, history
and draws. With no bug it passes every setting of the suite; each bug is one that the single
all-filters golden let pass (issue 34, item 4):

* ``repetition_divides``: the repetition penalty divides every logit of the history, negative
  ones too (HF multiplies a logit ≤ 0 by θ);
* ``penalties_count_prompt``: the presence and frequency penalties count the prompt's ids too
  (OpenAI's count the generated ids only);
* ``frequency_once``: the frequency penalty counts an id once however often it was generated
  (the count capped at 1: a second presence penalty);
* ``top_k_no_ties``: top-k keeps exactly k ids when the k-th largest logit is tied;
* ``top_k_after_top_p``: top-p runs before top-k (HF: top-k, then top-p).
"""

from __future__ import annotations

import pathlib
from typing import Any, Union

import numpy as np

BUGS = (
    "repetition_divides",
    "penalties_count_prompt",
    "frequency_once",
    "top_k_no_ties",
    "top_k_after_top_p",
)
STAGES = ("penalized", "tempered", "top_k", "top_p", "min_p")


class SamplerPort:
    """A port's sampler with the bugs named in ``bugs`` (a subset of :data:`BUGS`)."""

    def __init__(self, bugs: Union[str, tuple[str, ...]] = ()) -> None:
        self.bugs = {bugs} if isinstance(bugs, str) else set(bugs)
        unknown = self.bugs - set(BUGS)
        if unknown:
            raise ValueError(f"unknown bugs {sorted(unknown)}")

    def penalize(self, z: np.ndarray, history: list[int], n_prompt: int, s: dict) -> np.ndarray:
        theta = np.float32(s["repetition_penalty"])
        for j in set(history):
            if z[j] > 0 or "repetition_divides" in self.bugs:
                z[j] = z[j] / theta
            else:
                z[j] = z[j] * theta
        counted = history if "penalties_count_prompt" in self.bugs else history[n_prompt:]
        counts: dict[int, int] = {}
        for j in counted:
            counts[j] = counts.get(j, 0) + 1
        for j, c in counts.items():
            if "frequency_once" in self.bugs:
                c = 1
            z[j] -= np.float32(c * s["frequency_penalty"] + s["presence_penalty"])
        return z

    @staticmethod
    def softmax(z: np.ndarray) -> np.ndarray:
        e = np.exp(z - z[np.isfinite(z)].max())
        return e / e.sum()

    def top_k(self, z: np.ndarray, k: int) -> np.ndarray:
        if k == 0 or k >= z.size:
            return z
        if "top_k_no_ties" in self.bugs:
            keep = np.argsort(-z, kind="stable")[:k]
            out = np.full_like(z, -np.inf)
            out[keep] = z[keep]
            return out
        kth = np.sort(z)[::-1][k - 1]
        return np.where(z < kth, -np.inf, z).astype(np.float32)

    def top_p(self, z: np.ndarray, p: float) -> np.ndarray:
        if p >= 1.0:
            return z
        order = np.argsort(-z, kind="stable")
        probs = self.softmax(z[order])
        keep = np.cumsum(probs) - probs < p  # the mass before an id < top_p
        smallest = z[order[keep]].min()
        return np.where(z < smallest, -np.inf, z).astype(np.float32)

    def min_p(self, z: np.ndarray, m: float) -> np.ndarray:
        if m <= 0:
            return z
        probs = self.softmax(z)
        return np.where(probs < m * probs.max(), -np.inf, z).astype(np.float32)

    def step(self, logits: np.ndarray, history: list[int], n_prompt: int, s: dict) -> dict:
        z = self.penalize(logits.astype(np.float32), history, n_prompt, s)
        out = {"penalized": z.copy()}
        if s["temperature"] == 0:  # greedy: the first argmax, no filter
            for name in STAGES[1:]:
                out[name] = z.copy()
            probs = np.zeros(z.size, np.float32)
            probs[int(np.argmax(z))] = 1
            return {**out, "probs": probs}
        z = z / np.float32(s["temperature"])
        out["tempered"] = z.copy()
        if "top_k_after_top_p" in self.bugs:
            out["top_p"] = z = self.top_p(z, s["top_p"])
            out["top_k"] = z = self.top_k(z, s["top_k"])
        else:
            out["top_k"] = z = self.top_k(z, s["top_k"])
            out["top_p"] = z = self.top_p(z, s["top_p"])
        out["min_p"] = z = self.min_p(z, s["min_p"])
        return {**out, "probs": self.softmax(z)}

    def run(self, golden: Union[str, pathlib.Path], stages: bool = True) -> dict[str, Any]:
        """The port's tensors for one sampler golden: probs and chosen, and the stages."""
        from gpt2np.golden.reader import GoldenFile

        with GoldenFile(golden) as g:
            s = g.manifest["setting"]
            logits, prompt, u, gold = g["logits"], g["prompt_ids"], g["u"], g["chosen"]
        history = [int(j) for j in prompt]
        out: dict[str, list] = {name: [] for name in (*STAGES, "probs", "chosen")}
        for i, row in enumerate(logits):
            step = self.step(row, history, len(prompt), s)
            for name, value in step.items():
                out[name].append(value)
            cdf = np.cumsum(step["probs"].astype(np.float64))
            out["chosen"].append(int(np.searchsorted(cdf, u[i] * cdf[-1], side="right")))
            history.append(int(gold[i]))  # the history goes on with the golden's choices
        names = (*STAGES, "probs", "chosen") if stages else ("probs", "chosen")
        return {name: np.array(out[name]) for name in names}

    def write(self, golden: Union[str, pathlib.Path], directory: pathlib.Path, **kw: Any) -> None:
        """Write :meth:`run`'s tensors as ``directory/NAME.npy``."""
        directory.mkdir(parents=True, exist_ok=True)
        for name, a in self.run(golden, **kw).items():
            np.save(directory / f"{name}.npy", a)
