"""The verified cache (gpt2np.checkpoint.conversion_cache): what it serves, what it refuses, what
it leaves.

Checkpoints are TF's own (scripts/make_tf_fixtures.py): ``tf/small`` is in OpenAI's layout and
is mapped in place; ``tf/sharded`` (two shards) is converted to safetensors."""

from __future__ import annotations

import errno
import glob
import json
import multiprocessing
import os
import pathlib
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

import gpt2np
from gpt2np import CheckpointError, load
from gpt2np.checkpoint import conversion_cache as cache_module
from gpt2np.checkpoint import load_dir
from gpt2np.checkpoint.tf_bundle import read_tf_index
from gpt2np.params import flatten

FIXTURES = pathlib.Path(__file__).parent.parent / "fixtures"
TF_SMALL = FIXTURES / "tf" / "small"
TF_SHARDED = FIXTURES / "tf" / "sharded"
DATA = "model.ckpt.data-00000-of-00001"


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    """Keep every cache of these tests inside tmp_path."""
    monkeypatch.setenv("GPT2NP_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture
def settled(monkeypatch):
    """Files copied a moment ago are "racy" (verified again on next use); these tests look at
    what the stamp alone catches, as for a checkpoint written more than two seconds ago."""
    monkeypatch.setattr(cache_module, "RACY_NS", 0)


def expected(src):
    """Every flat tensor as TensorFlow wrote it (the leading 1 of conv1d weights squeezed)."""
    with np.load(src / "expected.npz", allow_pickle=False) as z:
        tf = {k: z[k] for k in z.files}
    out = {}
    for name in flatten(load(src, use_cache=False).params):
        parts = name.split(".")
        parts = [f"h{parts[1]}", *parts[2:]] if parts[0] == "blocks" else parts
        a = tf["model/" + "/".join(parts)]
        out[name] = a[0] if a.ndim == 3 else a
    return out


def assert_weights(model, src=TF_SMALL):
    want = expected(src)
    got = flatten(model.params)
    assert got.keys() == want.keys()
    for name, a in want.items():
        np.testing.assert_array_equal(got[name], a, err_msg=name)


def copy(tmp_path, src=TF_SMALL, name="m") -> pathlib.Path:
    shutil.copytree(src, tmp_path / name)
    return tmp_path / name


def only_entry(cache) -> pathlib.Path:
    (entry,) = pathlib.Path(cache).glob("*.json")
    return entry


def forge(entry, change):
    """Edit an entry's body and give it a matching checksum: what the checksum cannot catch."""
    raw = json.loads(entry.read_text())
    change(raw["body"])
    raw["sha256"] = cache_module._digest(raw["body"])
    entry.write_text(json.dumps(raw))


def flip(path, offset, bits=0x40):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([b ^ bits]))


def wte_offset(d) -> int:
    _, entries = read_tf_index(str(d / "model.ckpt"))
    return entries["model/wte"].offset


# --- what an entry is -------------------------------------------------------------------------


def test_openai_layout_is_mapped_in_place_from_the_checkpoint_itself(tmp_path):
    d = copy(tmp_path)
    cache = tmp_path / "c"
    first = load(d, cache_dir=cache)
    assert_weights(first)
    entry = only_entry(cache)
    assert os.listdir(cache) == [entry.name]  # the entry is offsets and stamps, no data
    assert entry.stat().st_size < 20_000
    assert os.stat(d / DATA).st_nlink == 1  # no hard link to the user's file
    body = json.loads(entry.read_text())["body"]
    assert body["kind"] == "in-place" and body["data"][0] == str(d / DATA)
    _, entries = read_tf_index(str(d / "model.ckpt"))
    assert body["tensors"]["blocks.0.attn.c_attn.w"][:3] == [
        entries["model/h0/attn/c_attn/w"].offset, "<f4", [16, 48]]  # fmt: skip
    warm = load(d, cache_dir=cache)
    assert_weights(warm)
    for name, a in flatten(warm.params).items():
        assert not a.flags.writeable and not a.flags.owndata, name  # views of one map


def test_editing_the_cache_cannot_touch_the_checkpoint(tmp_path):
    """Truncating the cache's files leaves the user's checkpoint whole: the cache holds no name
    (no hard link) for any of the user's files."""
    d = copy(tmp_path)
    cache = tmp_path / "c"
    load(d, cache_dir=cache)
    size = os.path.getsize(d / DATA)
    for f in cache.iterdir():
        os.truncate(f, 10)
    assert os.path.getsize(d / DATA) == size
    with pytest.warns(UserWarning, match="damaged cache entry"):
        assert_weights(load(d, cache_dir=cache))


def test_other_layouts_are_converted_once_then_mapped(tmp_path):
    cache = tmp_path / "c"
    assert_weights(load(TF_SHARDED, cache_dir=cache), TF_SHARDED)
    entry = only_entry(cache)
    (converted,) = cache.glob("*.safetensors")
    assert converted.name.startswith(entry.stem + ".")
    warm = load(TF_SHARDED, cache_dir=cache)
    assert_weights(warm, TF_SHARDED)
    assert not warm.params["wte"].flags.writeable  # mapped from the converted file


@pytest.mark.oracle
def test_converted_file_is_read_alike_by_hf_safetensors(tmp_path):
    st_numpy = pytest.importorskip("safetensors.numpy")
    model = load(TF_SHARDED, cache_dir=tmp_path / "c")
    (converted,) = (tmp_path / "c").glob("*.safetensors")
    theirs = st_numpy.load_file(str(converted))
    from gpt2np.checkpoint.convert import hf_from_flat

    ours = hf_from_flat(flatten(model.params))
    assert theirs.keys() == ours.keys()
    for name, a in ours.items():
        np.testing.assert_array_equal(theirs[name], a, err_msg=name)


def test_use_cache_false_writes_nothing_and_index_path_honours_cache_dir(tmp_path, home):
    assert_weights(load(TF_SMALL, use_cache=False))
    index = TF_SMALL / "model.ckpt.index"
    load(index, use_cache=False, cache_dir=tmp_path / "c")
    assert not (tmp_path / "c").exists() and not (home / "cache").exists()
    assert_weights(load(index, cache_dir=tmp_path / "c"))
    assert len(os.listdir(tmp_path / "c")) == 1 and not (home / "cache").exists()


def test_gpt2np_home_with_a_tilde_is_expanded(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    monkeypatch.setenv("GPT2NP_HOME", "~/gh")
    monkeypatch.chdir(tmp_path)
    load(TF_SMALL)
    assert len(os.listdir(tmp_path / "user" / "gh" / "cache")) == 1
    assert not (tmp_path / "~").exists()


# --- the checkpoint changes -------------------------------------------------------------------


def test_a_byte_changed_with_its_mtime_restored_is_found(tmp_path, settled):
    """A byte of the data file changed and its mtime restored with `touch -r` is noticed: the
    stamp includes ctime, which no call can set back, so the entry is verified again."""
    d = copy(tmp_path)
    cache = tmp_path / "c"
    load(d, cache_dir=cache)
    data = d / DATA
    st = os.stat(data)
    flip(data, wte_offset(d) + 4 * 16 * 10 + 3)
    os.utime(data, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(data).st_mtime_ns == st.st_mtime_ns and os.path.getsize(data) == st.st_size
    with pytest.raises(CheckpointError, match=r"checksum mismatch for tensor model/wte in .*data"):
        load(d, cache_dir=cache)
    assert not list(cache.glob("*.json"))  # and nothing claims it verified


def test_a_replaced_checkpoint_is_not_served_stale(tmp_path, settled):
    d = copy(tmp_path)
    cache = tmp_path / "c"
    load(d, cache_dir=cache)
    for f in d.glob("model.ckpt*"):
        f.unlink()
    for f in TF_SHARDED.glob("model.ckpt*"):
        shutil.copy(f, d / f.name)
    assert_weights(load(d, cache_dir=cache), TF_SHARDED)
    assert len(list(cache.glob("*.json"))) == 1  # the same place: the entry was replaced


def test_bit_rot_beneath_the_stamp_is_found_by_verify(tmp_path, settled):
    """Bytes that change with no write (a failing disk) keep the stamp: the cache serves them,
    as its documentation says, unless verify=True, which checks every CRC-32C. Simulated by
    forging the entry's stamps after the change."""
    d = copy(tmp_path)
    cache = tmp_path / "c"
    load(d, cache_dir=cache)
    flip(d / DATA, wte_offset(d) + 100)
    new = cache_module.stamp(os.stat(d / DATA))
    forge(
        only_entry(cache),
        lambda b: b.update(data=[b["data"][0], new], shards=[[b["data"][0], new]]),
    )
    assert not np.array_equal(load(d, cache_dir=cache).params["wte"], expected(TF_SMALL)["wte"])
    with pytest.raises(CheckpointError, match=r"checksum mismatch for tensor model/wte in .*data"):
        load(d, cache_dir=cache, verify=True)
    with pytest.raises(CheckpointError, match="checksum mismatch"):
        load(d, cache_dir=cache)  # the entry went with the failed check


def test_a_recently_changed_file_is_verified_again_on_next_use(tmp_path, monkeypatch):
    """Two writes within one tick of the file system's clock leave the same stamp: an entry made
    within RACY_NS of the file's last change is verified again before it is trusted."""
    d = copy(tmp_path)
    cache = tmp_path / "c"
    load(d, cache_dir=cache)
    body = json.loads(only_entry(cache).read_text())["body"]
    assert body["racy"]  # the copy was made a moment ago
    flip(d / DATA, wte_offset(d) + 100)
    new = cache_module.stamp(os.stat(d / DATA))
    forge(
        only_entry(cache),
        lambda b: b.update(data=[b["data"][0], new], shards=[[b["data"][0], new]]),
    )
    with pytest.raises(CheckpointError, match="checksum mismatch for tensor model/wte"):
        load(d, cache_dir=cache)
    d2 = copy(tmp_path, name="m2")
    load(d2, cache_dir=cache)
    monkeypatch.setattr(cache_module, "RACY_NS", 0)  # time has passed
    calls = []
    real = cache_module.file_crcs
    monkeypatch.setattr(
        cache_module, "file_crcs", lambda *a, **kw: calls.append(1) or real(*a, **kw)
    )
    assert_weights(load(d2, cache_dir=cache))
    assert calls and not json.loads(only_entry_of(cache, d2).read_text())["body"]["racy"]
    assert_weights(load(d2, cache_dir=cache))
    assert len(calls) == 1  # settled: the stamp suffices


def only_entry_of(cache, d) -> pathlib.Path:
    return pathlib.Path(cache_module.entry_path(str(cache), str(d / "model.ckpt"),
                                                str(d / "hparams.json")))  # fmt: skip


def test_a_symlinked_data_file_is_mapped_and_its_target_stamped(tmp_path, settled):
    d = copy(tmp_path)
    (d / DATA).rename(tmp_path / "real.data")
    (d / DATA).symlink_to(os.path.join("..", "real.data"))
    cache = tmp_path / "c"
    assert_weights(load(d, cache_dir=cache))
    assert_weights(load(d, cache_dir=cache))
    flip(tmp_path / "real.data", wte_offset(d) + 8)
    with pytest.raises(CheckpointError, match="checksum mismatch for tensor model/wte"):
        load(d, cache_dir=cache)


# --- the cache is damaged ---------------------------------------------------------------------


def _set_offset(value):
    def change(body):
        body["tensors"]["blocks.0.ln_1.b"][0] = value(body)

    return change


def _swap(body):
    t = body["tensors"]
    t["blocks.0.ln_1.b"][0], t["blocks.0.ln_1.g"][0] = (
        t["blocks.0.ln_1.g"][0],
        t["blocks.0.ln_1.b"][0],
    )


DAMAGE = {
    "offset true": _set_offset(lambda b: True),
    "offset 1": _set_offset(lambda b: 1),
    "overlapping": _set_offset(lambda b: b["tensors"]["blocks.0.ln_1.g"][0]),
    "past the end": _set_offset(lambda b: b["data"][1][2]),
    "swapped": _swap,
    "a tensor missing": lambda b: b["tensors"].pop("blocks.1.ln_2.b"),
    "an extra tensor": lambda b: b["tensors"].update({"extra": b["tensors"]["wte"]}),
    "size 1e400": lambda b: b["data"][1].__setitem__(2, 1e400),
    "n_layer 10**12": lambda b: b["hparams"].update(n_layer=10**12),
    "a shape": lambda b: b["tensors"]["wpe"].__setitem__(2, [16, 15]),
    "a dtype": lambda b: b["tensors"]["wpe"].__setitem__(1, "<i4"),
    "the format": lambda b: b.update(format="gpt2np-cache-1"),
    "another data file": lambda b: b.update(data=["/etc/hostname", b["data"][1]]),
    "a NUL in a path": lambda b: b["shards"][0].__setitem__(0, b["data"][0] + "\0"),
}


@pytest.mark.parametrize("forged", [False, True], ids=["edited", "forged checksum"])
@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_entry_is_discarded_and_rebuilt_never_served(tmp_path, damage, forged):
    """A hand-edited entry is never served. An edit breaks the entry's checksum;
    with a forged checksum the structure checks catch what they can, and a swap of two
    tensors of one size (which only a forger makes) is served, as the README says, unless
    verify=True, which checks each tensor's CRC-32C."""
    d = copy(tmp_path)
    cache = tmp_path / "c"
    load(d, cache_dir=cache)
    entry = only_entry(cache)
    if forged:
        forge(entry, DAMAGE[damage])
    else:
        raw = json.loads(entry.read_text())
        DAMAGE[damage](raw["body"])
        entry.write_text(json.dumps(raw))
    if forged and damage == "swapped":  # the CRCs stay with the names: verified against the
        forge(entry, lambda b: b.update(racy=False))  # index again, the entry is replaced
        assert not np.array_equal(load(d, cache_dir=cache).params["blocks"][0]["ln_1"]["g"],
                                  expected(TF_SMALL)["blocks.0.ln_1.g"])  # fmt: skip
        assert_weights(load(d, cache_dir=cache, verify=True))
    elif forged and damage == "n_layer 10**12":  # another model's entry: replaced, no warning
        assert_weights(load(d, cache_dir=cache))
    else:
        with pytest.warns(UserWarning, match="discarding a damaged cache entry") as caught:
            assert_weights(load(d, cache_dir=cache))
        assert [w.filename for w in caught] == [__file__]  # attributed to the caller
    assert_weights(load(d, cache_dir=cache))  # rebuilt, and no warning again


def _swap_records(body):
    """Swap two tensors' whole records, offsets and CRC-32Cs alike: what a forger does."""
    t = body["tensors"]
    t["ln_f.g"], t["ln_f.b"] = t["ln_f.b"], t["ln_f.g"]
    body["racy"] = False


@pytest.mark.parametrize("src", [TF_SMALL, TF_SHARDED], ids=["in place", "converted"])
def test_verify_checks_against_the_checkpoint_not_the_entry(tmp_path, src, settled):
    """An entry that agrees with itself (checksum and CRC-32Cs forged to match) but not with
    the checkpoint is served without verify, as documented; verify=True checks the checkpoint
    against its own index and serves the right weights."""
    cache = tmp_path / "c"
    load(src, cache_dir=cache)
    forge(only_entry(cache), _swap_records)
    forged = load(src, cache_dir=cache).params["ln_f"]
    assert np.array_equal(forged["g"], expected(src)["ln_f.b"])  # the forgery is served
    if src == TF_SMALL:  # the entry is rewritten from the index
        assert_weights(load(src, cache_dir=cache, verify=True), src)
    else:  # the conversion is found to differ from the checkpoint, and replaced
        with pytest.warns(
            UserWarning, match=r"tensor ln_f\.[gb] in .* differs from the checkpoint"
        ):
            assert_weights(load(src, cache_dir=cache, verify=True), src)
    assert_weights(load(src, cache_dir=cache), src)  # and the entry was put right


@pytest.mark.parametrize(
    "content",
    [b"", b"\0" * 8, b"[1, 2]", b'{"body": {}, "sha256": "x"}', b"[" * 100_000 + b"]" * 100_000,
     b'{"body": {"size": 1e400}, "sha256": 1}', b"\xff\xfe{}"],
    ids=["empty", "zeros", "a list", "no fields", "deeply nested", "1e400", "not UTF-8"],
)  # fmt: skip
def test_unreadable_entries_are_discarded_once(tmp_path, content):
    """A RecursionError (deep nesting) or OverflowError (1e400) recurred on every load, as the
    damaged entry was never discarded."""
    cache = tmp_path / "c"
    load(TF_SMALL, cache_dir=cache)
    only_entry(cache).write_bytes(content)
    with pytest.warns(UserWarning, match="damaged cache entry"):
        assert_weights(load(TF_SMALL, cache_dir=cache))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert_weights(load(TF_SMALL, cache_dir=cache))


@pytest.mark.parametrize("how", ["a byte flipped", "truncated", "deleted", "replaced"])
def test_a_damaged_conversion_is_rebuilt(tmp_path, how, settled):
    """The converted file is the cache's own: any write to it changes its stamp."""
    cache = tmp_path / "c"
    load(TF_SHARDED, cache_dir=cache)
    (converted,) = cache.glob("*.safetensors")
    if how == "a byte flipped":
        flip(converted, converted.stat().st_size - 100)
    elif how == "truncated":
        os.truncate(converted, converted.stat().st_size - 64)
    elif how == "deleted":
        converted.unlink()
    else:
        blob = converted.read_bytes()
        converted.unlink()
        converted.write_bytes(blob)
    with pytest.warns(UserWarning, match="damaged cache entry"):
        assert_weights(load(TF_SHARDED, cache_dir=cache), TF_SHARDED)
    assert len(list(cache.glob("*.safetensors"))) == 1
    assert_weights(load(TF_SHARDED, cache_dir=cache), TF_SHARDED)


def test_bit_rot_in_a_conversion_is_found_by_verify(tmp_path, settled):
    cache = tmp_path / "c"
    load(TF_SHARDED, cache_dir=cache)
    (converted,) = cache.glob("*.safetensors")
    flip(converted, converted.stat().st_size - 100)
    new = cache_module.stamp(converted.stat())
    forge(only_entry(cache), lambda b: b.update(data=[b["data"][0], new]))
    with pytest.warns(UserWarning, match=r"tensor \S+ in .*safetensors differs from the checkp"):
        assert_weights(load(TF_SHARDED, cache_dir=cache, verify=True), TF_SHARDED)
    assert_weights(load_dir(TF_SHARDED, cache_dir=cache, verify=True), TF_SHARDED)


# --- writing entries --------------------------------------------------------------------------


def test_corrupt_data_names_tensor_and_file_and_records_nothing(tmp_path):
    d = copy(tmp_path)
    _, entries = read_tf_index(str(d / "model.ckpt"))
    name, entry = max(entries.items(), key=lambda item: item[1].size)
    flip(d / DATA, entry.offset + entry.size // 2)
    with pytest.raises(CheckpointError, match=rf"tensor {name} in .*data-00000-of-00001"):
        load(d, cache_dir=tmp_path / "c")
    assert not (tmp_path / "c").exists() or os.listdir(tmp_path / "c") == []


def test_tensors_are_checked_in_pieces_and_a_flip_in_a_later_piece_is_found(tmp_path, monkeypatch):
    from gpt2np.checkpoint import verify

    real = verify.file_crcs
    monkeypatch.setattr(verify, "file_crcs", lambda *a, **kw: real(*a, **kw, piece=1000))
    assert_weights(load(TF_SMALL, cache_dir=tmp_path / "c1"))  # pieces recombined right
    d = copy(tmp_path)
    _, entries = read_tf_index(str(d / "model.ckpt"))
    name, entry = max(entries.items(), key=lambda item: item[1].size)
    assert entry.size > 3000  # several pieces
    flip(d / DATA, entry.offset + entry.size - 1, 0x01)
    with pytest.raises(CheckpointError, match=rf"tensor {name} in "):
        load(d, cache_dir=tmp_path / "c2")


@pytest.mark.parametrize("src", ["in place", "converted"])
def test_an_interrupted_first_load_leaves_nothing(tmp_path, monkeypatch, src):
    from gpt2np.checkpoint import verify

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    if src == "in place":
        monkeypatch.setattr(verify, "file_crcs", interrupted)
    else:
        monkeypatch.setattr(cache_module, "crc32c", interrupted)  # after the file is written
    with pytest.raises(KeyboardInterrupt):
        load(TF_SMALL if src == "in place" else TF_SHARDED, cache_dir=tmp_path / "c")
    assert not (tmp_path / "c").exists() or os.listdir(tmp_path / "c") == []


@pytest.mark.parametrize("src", ["in place", "converted"])
def test_a_full_disk_leaves_no_temporary_file_and_still_loads(tmp_path, monkeypatch, src):
    real = os.fsync

    def full(fd):
        if os.fstat(fd).st_nlink and str(tmp_path / "c") in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd)

    monkeypatch.setattr(os, "fsync", full)
    source = TF_SMALL if src == "in place" else TF_SHARDED
    with pytest.warns(UserWarning, match="could not write the conversion cache") as caught:
        assert_weights(load(source, cache_dir=tmp_path / "c"), source)
    assert len(caught) == 1
    assert os.listdir(tmp_path / "c") == []


def test_an_unwritable_cache_still_loads(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.warns(UserWarning, match="could not write the conversion cache") as caught:
        assert_weights(load(TF_SHARDED, cache_dir=blocker / "cache"), TF_SHARDED)
    assert len(caught) == 1 and caught[0].filename == __file__


def test_what_the_cache_did_not_write_is_never_touched(tmp_path):
    """cache_dir may be a directory of the user's: folders named tf-*, files named *.tmp (however
    old) and anything else not marked as the cache's own stay, through first loads, warm loads
    and the tidying that writing an entry does."""
    cache = tmp_path / "c"
    cache.mkdir()
    theirs = {
        "tf-" + "0" * 40: "dir", "tf-mine": "dir", "notes.tmp": "file", "x.json.a.tmp": "file",
        ".hidden.tmp": "file", "0" * 40 + ".1234abcd.safetensors": "file",
        ".x.json.gpt2np-notapid-0123456789ab.tmp": "file",
    }  # fmt: skip
    two_days_ago = time.time() - 2 * 24 * 3600
    for name, kind in theirs.items():
        if kind == "dir":
            (cache / name).mkdir()
            (cache / name / "model.ckpt.data").write_bytes(b"mine")
        else:
            (cache / name).write_bytes(b"mine")
        os.utime(cache / name, (two_days_ago, two_days_ago))
    for src in (TF_SMALL, TF_SHARDED, TF_SMALL):
        assert_weights(load(src, cache_dir=cache), src)
    d = copy(tmp_path, TF_SHARDED)
    load(d, cache_dir=cache)
    shutil.rmtree(d)
    load(copy(tmp_path, TF_SHARDED, name="m2"), cache_dir=cache)  # writes an entry: tidies
    assert set(theirs) <= set(os.listdir(cache))
    assert all((cache / n).is_dir() == (k == "dir") for n, k in theirs.items())


def test_conversions_of_vanished_checkpoints_and_dead_writers_are_removed(tmp_path):
    """The cache's own leftovers go: the conversion of a checkpoint that no longer exists, a
    conversion that no entry names whose writer is gone, a dead writer's temporary file."""
    cache = tmp_path / "c"
    d = copy(tmp_path, TF_SHARDED)
    load(d, cache_dir=cache)
    shutil.rmtree(d)
    dead = dead_pid()
    orphan = cache / f"{'1' * 40}.gpt2np-{dead}-0123456789ab.safetensors"
    temporary = cache / f".{'2' * 40}.json.gpt2np-{dead}-0123456789ab.tmp"
    for f in (orphan, temporary):
        f.write_bytes(b"half written")
    load(TF_SMALL, cache_dir=cache)
    assert sorted(p.suffix for p in cache.iterdir()) == [".json"]


def dead_pid() -> int:
    """The pid of a process that has exited."""
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)  # fmt: skip
    return int(child.stdout)


def _load_in_child(args):
    import warnings

    src, cache = args
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = load(src, cache_dir=cache)
    sums = sorted((k, float(np.asarray(a).sum())) for k, a in flatten(model.params).items())
    return sums, [str(w.message) for w in caught]


@pytest.mark.parametrize("src", [TF_SMALL, TF_SHARDED], ids=["in place", "converted"])
def test_concurrent_first_loads_agree_and_leave_one_entry(tmp_path, src):
    """Eight processes load one checkpoint first at once: the same weights, no warning (a
    conversion another process just wrote is not taken for damage), one entry."""
    d = copy(tmp_path, src)
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        results = pool.map(_load_in_child, [(str(d), str(tmp_path / "c"))] * 8)
    assert all(r[0] == results[0][0] for r in results)
    assert not [w for r in results for w in r[1]]
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert_weights(load(d, cache_dir=tmp_path / "c"), src)
    names = os.listdir(tmp_path / "c")
    assert not [n for n in names if n.endswith(".tmp")]
    assert len(glob.glob(str(tmp_path / "c" / "*.json"))) == 1
    converted = glob.glob(str(tmp_path / "c" / "*.safetensors"))  # a minute's grace for each
    assert (1 <= len(converted) <= 8) if src == TF_SHARDED else not converted


def test_the_in_place_path_accepts_only_what_the_general_path_accepts(tmp_path, monkeypatch):
    """An index entry claiming shard 3 of 1, or an unknown rank, is refused by read_tf_checkpoint;
    mapping in place must not serve it either (use_cache must not change what loads)."""
    import dataclasses

    from gpt2np.checkpoint import tf_bundle

    real = tf_bundle.parse_tf_index
    for lie in ({"shard_id": 3}, {"unknown_rank": True}):

        def lying_index(data, index, lie=lie):
            header, entries = real(data, index)
            name = "model/h0/attn/c_attn/b"
            return header, {**entries, name: dataclasses.replace(entries[name], **lie)}

        monkeypatch.setattr(cache_module, "parse_tf_index", lying_index)
        monkeypatch.setattr(tf_bundle, "parse_tf_index", lying_index)
        with pytest.raises(CheckpointError, match="model/h0/attn/c_attn/b"):
            load(TF_SMALL, use_cache=False)
        with pytest.raises(CheckpointError, match="model/h0/attn/c_attn/b"):
            load(TF_SMALL, cache_dir=tmp_path / "c")


def test_hparams_change_is_a_new_model_not_a_stale_one(tmp_path, settled):
    d = copy(tmp_path)
    cache = tmp_path / "c"
    load(d, cache_dir=cache)
    hp = json.loads((d / "hparams.json").read_text())
    (d / "hparams.json").write_text(json.dumps({**hp, "n_layer": 1}))
    with pytest.raises(CheckpointError, match=r"n_layer=1 does not: model/h1/"):
        load(d, cache_dir=cache)
    assert isinstance(load(TF_SMALL).hparams, gpt2np.HParams)


def test_a_file_system_that_cannot_map_files_gets_a_conversion(tmp_path, monkeypatch):
    from gpt2np.checkpoint import verify

    def unmappable(*args):
        raise OSError(errno.ENODEV, "No such device")

    monkeypatch.setattr(verify, "map_file", unmappable)
    assert_weights(load(TF_SMALL, cache_dir=tmp_path / "c"))
    assert len(list((tmp_path / "c").glob("*.safetensors"))) == 1


def test_what_a_killed_first_load_leaves_the_next_load_removes(tmp_path):
    """SIGKILL (no cleanup runs) while the entry is written, while the conversion is written,
    and between the conversion and its entry: the next load serves the right weights and
    leaves only its entry (and conversion)."""
    from tests.helpers.killpoints import Kill, kill_all

    cases = {  # name: (checkpoint, call of os.replace at which it is killed)
        "entry": (TF_SMALL, 1),
        "conversion": (TF_SHARDED, 1),
        "between": (TF_SHARDED, 2),
    }
    kills = []
    for name, (src, nth) in cases.items():
        setup = f"import gpt2np; src, cache = {str(src)!r}, {str(tmp_path / name)!r}"
        kills.append(Kill(setup, "gpt2np.load(src, cache_dir=cache)", "os.replace", nth))
    kill_all(kills)
    left = {name: sorted(os.listdir(tmp_path / name)) for name in cases}
    assert [n for n in left["entry"] if n.endswith(".tmp")] and not left["entry"][1:]
    assert [n for n in left["conversion"] if n.endswith(".tmp")]
    assert [n for n in left["between"] if n.endswith(".safetensors")]  # named by no entry
    for name, (src, _) in cases.items():
        assert_weights(load(src, cache_dir=tmp_path / name), src)
        after = sorted(pathlib.Path(p).suffix for p in os.listdir(tmp_path / name))
        assert after == ([".json"] if src == TF_SMALL else [".json", ".safetensors"]), name
