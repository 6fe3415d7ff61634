"""gpt2np.dump: decode steps, batches, ragged rows, the loss, the aligned layout, atomic writes.

What a golden file holds is checked against independent computations: the clear forward pass
run by hand with a past, single-row traces for the rows of a ragged batch, gpt2np's generation
cache (which pads a ragged batch its own way), tests/helpers/toyport.py (an independent port with
left padding) and scoring's log-probabilities. The layout is read with the standard library's
zipfile and by hand, following APPNOTE.TXT.
"""

from __future__ import annotations

import errno
import json
import os
import pathlib
import struct
import subprocess
import sys
import textwrap
import zipfile

import numpy as np
import pytest

import gpt2np
from gpt2np.golden import MANIFEST_KEY, GoldenFile, dump
from gpt2np.golden.trace import tensor_names, trace
from gpt2np.model import forward
from gpt2np.params import flatten
from tests.helpers.toyport import ToyPort

IDS = [[5, 17, 42, 3, 88, 60], [1, 2, 3, 4, 5, 6]]


def read_npz(path: pathlib.Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def manifest_of(path: pathlib.Path) -> dict:
    return json.loads(read_npz(path)[MANIFEST_KEY].tobytes())


def local_headers(path: pathlib.Path) -> list[tuple[str, int, bytes]]:
    """(name, data offset, local extra field) of every member, read from the local headers."""
    out = []
    data = path.read_bytes()
    with zipfile.ZipFile(path) as z:
        for info in z.infolist():
            sig, *_, n_name, n_extra = struct.unpack_from("<IHHHHHIIIHH", data, info.header_offset)
            assert sig == 0x04034B50
            start = info.header_offset + 30
            name = data[start : start + n_name].decode()
            extra = data[start + n_name : start + n_name + n_extra]
            out.append((name, start + n_name + n_extra, extra))
    return out


# ---- the layout -----------------------------------------------------------------------------


def test_every_tensor_is_64_byte_aligned_and_listed_with_its_offset(tiny_model, tmp_path) -> None:
    path = tmp_path / "g.npz"
    m = dump(tiny_model, IDS, path, prefix=2)
    with zipfile.ZipFile(path) as z:
        assert z.testzip() is None  # every CRC checks out
        assert all(i.compress_type == zipfile.ZIP_STORED for i in z.infolist())
    entries = {t["name"]: t for t in m["tensors"]}
    data = path.read_bytes()
    for name, start, extra in local_headers(path):
        assert start % 64 == 0, name  # the member (its .npy header) starts aligned
        assert b"\x01\x00" not in extra[:2]  # no ZIP64 record: this file needs none
        header_len = 10 + int.from_bytes(data[start + 8 : start + 10], "little")
        assert header_len % 64 == 0
        if name != MANIFEST_KEY + ".npy":
            t = entries[name[: -len(".npy")]]
            assert t["offset"] == start + header_len and t["offset"] % 64 == 0
            raw = data[t["offset"] : t["offset"] + t["nbytes"]]
            a = np.frombuffer(raw, np.dtype(t["dtype"]).newbyteorder("<")).reshape(t["shape"])
            np.testing.assert_array_equal(a, read_npz(path)[t["name"]])
    assert [t["name"] for t in m["tensors"]] == list(read_npz(path))[1:]
    assert m["alignment"] == 64


def test_the_manifest_and_the_tensors(tiny_model, tmp_path) -> None:
    path = tmp_path / "g.npz"
    m = dump(tiny_model, IDS, path, model_name="tiny")
    assert manifest_of(path) == json.loads(json.dumps(m))
    z = read_npz(path)
    names = ["ids", "targets", *tensor_names(2), "loss", "loss.mean"]
    assert list(z) == [MANIFEST_KEY, *names]
    t = trace(tiny_model, IDS)
    for name in t:
        np.testing.assert_array_equal(z[name], t[name])
    assert m["T_past"] == 0 and m["prefix_ids"] is None and m["pad"] is None
    assert m["targets"] == "next" and m["ids"] == IDS and m["model"] == "tiny"
    axes = {e["name"]: e["axes"] for e in m["tensors"]}
    assert axes["h1.attn.scores"] == "B H T S" and axes["loss.mean"] == "" and axes["ids"] == "B T"
    assert oct(path.stat().st_mode & 0o777) == oct(0o666 & ~current_umask())


def test_a_file_past_4_gib_would_get_zip64_records(tmp_path) -> None:
    """The ZIP64 records are written where offsets or sizes need them; shown on the layout alone
    (writing 4 GiB in a test is too slow): members after 4 GiB get their offset in a ZIP64 extra
    field, and zipfile reads the central directory of such a file."""
    from gpt2np.golden.zipwrite import AlignedZip

    path = tmp_path / "sparse.zip"
    with open(path, "w+b") as f:
        z = AlignedZip(f, [("a.npy", 0xFFFFFFFF + 100), ("b.npy", 10)])
        for name, size in (("a.npy", 0xFFFFFFFF + 100), ("b.npy", 10)):
            f.seek(z.start(name) + size - 1)
            f.write(b"\0")  # a sparse file: nothing but the last byte is written
            z.members[name].pieces.append((0, size, 0))
        z.members["a.npy"].pieces = []  # no CRC work: mark both as written, crc checked below
        z.members["b.npy"].pieces = []
        for m in z.members.values():
            m.crc = 0
            f.seek(m.offset)
            f.write(z._local_header(m))
        f.seek(z.end)
        central = b"".join(z._central_header(m) for m in z.members.values())
        f.write(central + z._end_records(len(central)))
    with zipfile.ZipFile(path) as zf:
        infos = {i.filename: i for i in zf.infolist()}
    assert infos["a.npy"].file_size == 0xFFFFFFFF + 100
    assert infos["b.npy"].header_offset == z.members["b.npy"].offset > 0xFFFFFFFF
    assert z.start("b.npy") % 64 == 0


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# ---- decode steps ---------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["length", "ids", "text"])
def test_a_decode_step_after_a_prefix(tmp_path, how: str) -> None:
    hp = gpt2np.HParams(n_vocab=50257, n_ctx=16, n_embd=24, n_head=3, n_layer=2)
    model = gpt2np.GPT2(hp, gpt2np.init_params(hp, seed=4, std=0.2))
    ids = model.tokenizer.encode("Alan Turing theorized that machines")
    path = tmp_path / "step.npz"
    if how == "length":
        m = dump(model, ids, path, prefix=4)
    elif how == "ids":
        m = dump(model, ids[4:], path, prefix=ids[:4])
    else:
        m = dump(model, " that machines", path, prefix="Alan Turing theorized")
        ids = model.tokenizer.encode("Alan Turing theorized") + model.tokenizer.encode(
            " that machines"
        )
    P = len(ids) - 2 if how == "text" else 4
    z = read_npz(path)
    assert m["T_past"] == P and m["prefix_ids"] == [ids[:P]] and m["ids"] == [ids[P:]]
    assert [e["name"] for e in m["tensors"]][-1] == "past"
    _, past = forward(model.params, hp, np.array([ids[:P]]))  # the clear path, by hand
    np.testing.assert_array_equal(z["past"], past)
    t = trace(model, [ids[P:]], past=past)
    for name in t:
        np.testing.assert_array_equal(z[name], t[name])
    np.testing.assert_array_equal(z["embed.positions"][0], model.params["wpe"][P : len(ids)])
    assert z["h0.attn.scores"].shape == (1, 3, len(ids) - P, len(ids))
    full = trace(model, [ids])  # the step's logits are the full pass's last rows
    np.testing.assert_allclose(z["logits"], full.logits[:, P:], rtol=1e-5, atol=1e-5)


def test_a_single_token_step_has_no_default_loss(tiny_model, tmp_path) -> None:
    m = dump(tiny_model, [[5, 17, 42]], tmp_path / "g.npz", prefix=2)
    assert m["targets"] is None and "loss" not in [t["name"] for t in m["tensors"]]
    m = dump(tiny_model, [[5, 17, 42]], tmp_path / "g.npz", prefix=2, targets=[[7]])
    z = read_npz(tmp_path / "g.npz")
    assert m["targets"] == "given" and z["loss"].shape == (1, 1)
    logits = z["logits"][0, 0].astype(np.float64)
    expected = np.logaddexp.reduce(logits) - logits[7]
    np.testing.assert_allclose(z["loss"][0, 0], expected, rtol=1e-6)


def test_the_loss_is_scorings_negative_log_probability(tmp_path) -> None:
    hp = gpt2np.HParams(n_vocab=97, n_ctx=32, n_embd=24, n_head=3, n_layer=2)
    model = gpt2np.GPT2(hp, gpt2np.init_params(hp, seed=2, std=0.3))
    ids = list(range(3, 40, 3))
    dump(model, ids, tmp_path / "g.npz", dtype="float64")
    z = read_npz(tmp_path / "g.npz")
    s = model.astype(np.float64).score(ids)  # gpt2np.scoring.logprobs, its own log-softmax
    np.testing.assert_allclose(z["loss"][0], -np.asarray(s.token_logprobs), rtol=1e-10)
    np.testing.assert_allclose(z["loss.mean"], s.mean_nll, rtol=1e-10)
    np.testing.assert_array_equal(z["targets"][0], ids[1:])


# ---- batches and ragged rows ----------------------------------------------------------------


def test_a_ragged_batch_is_left_padded(tiny_model, tmp_path) -> None:
    rows = [[5, 17, 42, 3, 88], [9, 1], [4, 4, 4]]
    m = dump(tiny_model, rows, tmp_path / "g.npz", prefix=1)
    z = read_npz(tmp_path / "g.npz")
    assert m["pad"] == [0, 3, 2] and m["T_past"] == 1
    assert m["ids"] == [[17, 42, 3, 88], [0, 0, 9, 1], [0, 4, 4, 4]]
    assert m["prefix_ids"] == [[5], [0], [0]]
    assert z["loss"].shape == (3, 3)
    for b, row in enumerate(rows):  # each row alone, as its own (shorter) pass
        pad = m["pad"][b]
        prefix, step = (row[:1], row[1:]) if pad == 0 else ([], row)
        past = (
            forward(tiny_model.params, tiny_model.hparams, np.array([prefix]))[1]
            if prefix
            else None
        )
        t = trace(tiny_model, [step], past=past)
        n = len(step)
        np.testing.assert_array_equal(z["logits"][b, -n:], t.logits[0])
        np.testing.assert_array_equal(z["h1.attn.probs"][b, :, -n:, pad:], t["h1.attn.probs"][0])
        assert not z["logits"][b, :-n].any() and not z["h1.attn.probs"][b, :, :, :pad].any()
        np.testing.assert_array_equal(z["embed.positions"][b, -n:],
                                      tiny_model.params["wpe"][len(prefix) : len(row)])  # fmt: skip


def test_the_padded_rows_agree_with_generations_cache(tiny_model, tmp_path) -> None:
    """gpt2np's KVCache pads a ragged batch in one batched pass: same real positions' logits."""
    rows = [[5, 17, 42, 3, 88], [9, 1], [4, 4, 4]]
    dump(tiny_model, rows, tmp_path / "g.npz")
    z = read_npz(tmp_path / "g.npz")
    pad = np.array([0, 3, 2])
    cache = tiny_model.new_cache(3, max_len=5, pad=pad)
    padded = np.zeros((3, 5), np.int64)
    for b, row in enumerate(rows):
        padded[b, pad[b] :] = row
    logits = tiny_model.forward_cached(padded, cache)
    for b in range(3):
        np.testing.assert_allclose(z["logits"][b, pad[b] :], logits[b, pad[b] :], rtol=1e-4,
                                   atol=1e-5)  # fmt: skip


def test_an_independent_port_with_left_padding_passes(tmp_path) -> None:
    """tests/helpers/toyport.py pads the batch itself; compare ignores the padded positions."""
    hp = gpt2np.HParams(n_vocab=128, n_ctx=32, n_embd=32, n_head=4, n_layer=2)
    model = gpt2np.GPT2(hp, gpt2np.init_params(hp, seed=3, std=0.1))
    rows = [[5, 17, 42, 3, 88, 7, 9], [9, 1], [4, 4, 4, 4, 4]]
    m = dump(model, rows, tmp_path / "g.npz", dtype="float64", prefix=4)
    assert m["pad"] == [0, 5, 2]  # row 1 is padding up to its step's second position
    port = ToyPort(flatten(model.params), hp.n_head, "float32")
    port.prefill(np.array(m["prefix_ids"]), pad=np.array(m["pad"]))
    tensors = {"past": port.past()}
    tensors.update(port.step(np.array(m["ids"])))
    report = gpt2np.compare(tmp_path / "g.npz", tensors, allow_missing="loss*")
    assert report.ok, str(report)
    tensors["logits"][1, 0] += 100.0  # padding: not compared
    tensors["logits"][2, 0] += 100.0  # a real position
    report = gpt2np.compare(tmp_path / "g.npz", tensors)
    assert [r.name for r in report.diverged] == ["logits"] and report.diverged[0].worst[0] == 2


def test_inputs_that_do_not_fit(tiny_model, tmp_path) -> None:
    g = tmp_path / "g.npz"
    with pytest.raises(ValueError, match=r"prefix length 6 must be in \[0, 6\)"):
        dump(tiny_model, [[1, 2, 3, 4, 5, 6]], g, prefix=6)
    with pytest.raises(ValueError, match="same number of tokens"):
        dump(tiny_model, [[1, 2], [3]], g, prefix=[[1], [2]])
    with pytest.raises(ValueError, match="2 prefix rows for 3 rows"):
        dump(tiny_model, [[1], [2], [3]], g, prefix=[[1], [2]])
    with pytest.raises(ValueError, match="exceed n_ctx=32"):
        dump(tiny_model, [list(range(20))], g, prefix=[list(range(20))])
    with pytest.raises(ValueError, match="outside"):
        dump(tiny_model, [[1, 2], [3, 500]], g)
    with pytest.raises(ValueError, match="empty"):
        dump(tiny_model, [[1, 2], []], g)
    with pytest.raises(ValueError, match=r"targets must be \[B, T\] = \[1, 2\]"):
        dump(tiny_model, [[1, 2]], g, targets=[[1, 2, 3]])
    with pytest.raises(ValueError, match="float"):
        dump(tiny_model, IDS, g, dtype="int32")
    with pytest.raises(ValueError, match="does not exist"):
        dump(tiny_model, IDS, tmp_path / "no" / "x.npz")
    with pytest.raises(ValueError, match="is a directory"):
        dump(tiny_model, IDS, tmp_path)
    assert not g.exists() and [p.name for p in tmp_path.iterdir()] == []


# ---- atomic writes ------------------------------------------------------------------------


def test_a_failure_midway_leaves_nothing_and_keeps_the_old_file(tiny_model, tmp_path, monkeypatch):
    import gpt2np.golden.writer as dump_module

    path = tmp_path / "g.npz"
    dump(tiny_model, IDS, path)
    before = path.read_bytes()

    def boom(*args, **kwargs):
        raise KeyboardInterrupt  # an interrupt in the middle of the forward pass

    monkeypatch.setattr(dump_module, "trace_each", boom)
    with pytest.raises(KeyboardInterrupt):
        dump(tiny_model, IDS, path)
    assert [p.name for p in tmp_path.iterdir()] == ["g.npz"] and path.read_bytes() == before


@pytest.mark.parametrize("where", ["fallocate", "write"])
def test_a_full_disk_leaves_nothing(tiny_model, tmp_path, monkeypatch, where: str) -> None:
    from gpt2np.golden import zipwrite

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    if where == "fallocate":
        monkeypatch.setattr(os, "posix_fallocate", full, raising=False)
    else:
        monkeypatch.setattr(zipwrite.AlignedZip, "write", full)
    with pytest.raises(OSError, match="No space left"):
        dump(tiny_model, IDS, tmp_path / "g.npz")
    assert list(tmp_path.iterdir()) == []


FSIZE = """
import resource, signal, sys
sys.path.insert(0, {src!r})
import gpt2np
hp = gpt2np.HParams(n_vocab=97, n_ctx=64, n_embd=64, n_head=4, n_layer=2)
model = gpt2np.GPT2(hp, gpt2np.init_params(hp))
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails with EFBIG instead of a signal
resource.setrlimit(resource.RLIMIT_FSIZE, (50_000, 50_000))
try:
    gpt2np.dump(model, list(range(40)), "g.npz")
except OSError as e:
    print("OSError", e.errno)
"""


@pytest.mark.skipif(not hasattr(os, "posix_fallocate") or sys.platform != "linux", reason="Linux")
def test_a_real_write_failure_from_the_kernel_leaves_nothing(tmp_path) -> None:
    """RLIMIT_FSIZE makes the kernel refuse the write (EFBIG), as a full disk would (ENOSPC)."""
    src = str(pathlib.Path(gpt2np.__file__).parent.parent)
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(FSIZE.format(src=src))],
                       cwd=tmp_path, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.stdout.split() == ["OSError", str(errno.EFBIG)], r.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o077])
def test_the_file_takes_the_umasks_mode(tiny_model, tmp_path, umask: int) -> None:
    """Was 0600 whatever the umask (mkstemp's mode)."""
    old = os.umask(umask)
    try:
        dump(tiny_model, IDS, tmp_path / "g.npz")
    finally:
        os.umask(old)
    assert (tmp_path / "g.npz").stat().st_mode & 0o777 == 0o666 & ~umask


# ---- bounded memory -------------------------------------------------------------------------


STREAM = """
import sys
sys.path.insert(0, {src!r})
import numpy as np, gpt2np

def rss(field):  # bytes, from /proc/self/status: VmRSS now, VmHWM its peak since the reset
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field + ":"))

def reset_peak():  # the child's peak starts from here (a forked parent's memory does not count)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


hp = gpt2np.HParams(n_vocab=512, n_ctx=512, n_embd=64, n_head=16, n_layer=12)
model = gpt2np.GPT2(hp, gpt2np.init_params(hp))
ids = np.arange(512)
model.forward(ids[:8])  # warm up: imports, BLAS buffers
reset_peak()
before = rss("VmRSS")
m = gpt2np.dump(model, ids, "g.npz", dtype="float64", names=["*.attn.*", "logits"])
print(sum(t["nbytes"] for t in m["tensors"]), before, rss("VmHWM"))
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="Linux's VmHWM")
def test_dump_streams_tensors_to_disk(tmp_path) -> None:
    """The whole trace (~0.9 GB here: 12 layers of 34 MB scores and probs) is never in memory:
    the process grows by about one layer's intermediates and the forward pass's temporaries."""
    src = str(pathlib.Path(gpt2np.__file__).parent.parent)
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(STREAM.format(src=src))],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr
    total, before, after = map(int, r.stdout.split())
    assert total > 800e6 and (tmp_path / "g.npz").stat().st_size > total
    assert after - before < total / 3, f"grew {(after - before) / 1e6:.0f} MB for {total / 1e6:.0f}"


def test_golden_file_reads_its_own_output(tiny_model, tmp_path) -> None:
    dump(tiny_model, IDS, tmp_path / "g.npz", prefix=3)
    with GoldenFile(tmp_path / "g.npz") as g:
        assert g.T_past == 3 and g.names[0] == "ids" and g.names[-1] == "past"
        np.testing.assert_array_equal(g["ids"], np.array(IDS)[:, 3:])
        assert all(g.data_offset(n) % 64 == 0 for n in g.names)
        with pytest.raises(KeyError, match="no tensor 'nope'"):
            g["nope"]


def test_the_manifest_alone_locates_every_tensor(tiny_model, tmp_path) -> None:
    """docs/golden-files.md's recipe for a reader without NumPy or a ZIP library: the local
    header at offset 0, the manifest's .npy header after it, then each tensor's offset."""
    path = tmp_path / "g.npz"
    dump(tiny_model, IDS, path, dtype="float64", prefix=2)
    data = path.read_bytes()
    n_name, n_extra = struct.unpack_from("<HH", data, 26)
    npy = 30 + n_name + n_extra
    assert data[npy : npy + 6] == b"\x93NUMPY"
    (header_len,) = struct.unpack_from("<H", data, npy + 8)
    header = data[npy + 10 : npy + 10 + header_len].decode("ascii")
    assert "'descr': '|u1'" in header
    n = int(header.split("'shape': (")[1].split(",")[0])
    start = npy + 10 + header_len
    manifest = json.loads(data[start : start + n])
    with np.load(path) as z:
        for t in manifest["tensors"]:
            code = {"float64": "d", "int64": "q"}[t["dtype"]]
            values = struct.unpack_from(f"<{t['nbytes'] // 8}{code}", data, t["offset"])
            np.testing.assert_array_equal(np.array(values).reshape(t["shape"]), z[t["name"]])


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this OS")
def test_cli_dump_refuses_to_replace_a_fifo(tiny_model, tmp_path, monkeypatch, capsys) -> None:
    """`gpt2np dump --out FIFO` renamed its temporary file over the FIFO, which became a regular
    file: the command now refuses anything but a regular file, in one line, and leaves the FIFO
    (and no temporary file) behind."""
    import stat

    from gpt2np.cli import golden as cli_golden
    from gpt2np.cli import main

    monkeypatch.setattr(cli_golden, "load_model", lambda name, *args, **kw: tiny_model)
    fifo = tmp_path / "out.npz"
    os.mkfifo(fifo)
    assert main(["dump", "--ids", "1,2,3", "--out", str(fifo)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("gpt2np: error: refusing to replace") and str(fifo) in err
    assert len(err.strip().splitlines()) == 1
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.npz"]
