"""feedline.decoders.selection: engine= and decoder= chosen in one place, and the open decoder
registry: a decoder of the user's own, registered by name, runs a FeedLoader epoch,
`verify` and `feedline verify`."""
from __future__ import annotations

import io
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from feedline import FeedLoader

from feedline.decoders import selection
from feedline.core.choices import Engine
from feedline.decoders import (Decoder, available_decoders, damage_detection, decoder_names, get_decoder,
                               register_decoder, unregister_decoder)
from feedline.core.errors import BackendUnavailable
from feedline.decoders.selection import resolve_engine_and_decoder
from feedline.dataset.verify import verify

ROOT = Path(__file__).resolve().parents[1]


class CountingPil(Decoder):
    """A user's decoder: Pillow's plain decode, counting the images it decodes."""

    name = "mine"

    def __init__(self, calls: list | None = None):
        self.calls = calls if calls is not None else []

    def decode(self, data) -> np.ndarray:
        self.calls.append(len(data))
        return np.asarray(Image.open(io.BytesIO(bytes(data))).convert("RGB"))


@pytest.fixture
def mine():
    calls: list = []
    register_decoder("mine", lambda: CountingPil(calls))
    yield calls
    unregister_decoder("mine")


# -- the user's decoder, by name, everywhere -------------------------------------------------

def test_a_registered_decoder_runs_a_loader_epoch(packed_lmdb, mine):
    kwargs = dict(batch_size=8, size=32, num_workers=2, device="cpu", seed=4, shuffle=True, train=True)
    # ``mine`` counts the decodes of this process: the thread engine's; the workers' own copies count theirs
    with FeedLoader(str(packed_lmdb), decoder="mine", engine="threads", **kwargs) as loader, \
            FeedLoader(str(packed_lmdb), decoder="mine", **kwargs) as workers, \
            FeedLoader(str(packed_lmdb), decoder="pil", **kwargs) as pil:
        assert (loader.config.engine, loader.config.decoder) == (Engine.THREADS, "mine")
        assert (workers.config.engine, workers.config.decoder) == (Engine.PROCESSES, "mine")
        assert isinstance(loader.source.decoder, CountingPil)
        got, want, theirs = list(loader), list(pil), list(workers)
    assert len(mine) == 48 and len(got) == len(want) == len(theirs) == 6
    for (x, y), (px, py), (wx, wy) in zip(got, want, theirs):
        assert torch.equal(y, py) and (x - px).abs().mean() < 0.05   # the same crops, decoded by "mine"
        assert torch.equal(x, wx) and torch.equal(y, wy)             # in workers too


def test_a_registered_decoder_verifies_a_store(packed_lmdb, mine):
    result = verify(str(packed_lmdb), decoder="mine", jobs=2)
    assert result.ok and (result.decoder, result.decoded) == ("mine", 48) and len(mine) == 48
    assert "decode with mine" in result.summary()
    assert "mine" in decoder_names() and available_decoders()["mine"] is None
    assert damage_detection("mine").startswith("not stated")


def test_feedline_verify_finds_a_decoder_an_installed_package_declares(packed_lmdb, tmp_path):
    """The entry point group 'feedline.decoders': how `feedline verify --decoder NAME` (a new
    process) finds a decoder registered outside feedline."""
    (tmp_path / "my_plugin.py").write_text(textwrap.dedent('''
        import io
        import numpy as np
        from PIL import Image
        from feedline.decoders import Decoder

        class PluginDecoder(Decoder):
            name = "plugged"

            def decode(self, data):
                return np.asarray(Image.open(io.BytesIO(bytes(data))).convert("RGB"))
    '''))
    info = tmp_path / "my_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[feedline.decoders]\nplugged = my_plugin:PluginDecoder\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    done = subprocess.run([sys.executable, "-m", "feedline", "verify", str(packed_lmdb), "--decoder", "plugged",
                           "-j", "2"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "48 records" in done.stdout and "decode with plugged" in done.stdout
    unknown = subprocess.run([sys.executable, "-m", "feedline", "verify", str(packed_lmdb), "--decoder", "nope"],
                             capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert unknown.returncode == 2 and "unknown decoder 'nope'" in unknown.stderr
    assert "plugged" in unknown.stderr and "Traceback" not in unknown.stderr


def test_registering_refuses_engine_names_taken_names_and_non_factories(mine):
    for name in ("auto", "dali", "gpu", "threads"):
        with pytest.raises(ValueError, match="register your decoder under its own name"):
            register_decoder(name, CountingPil)
    with pytest.raises(ValueError, match="'mine' is already registered; pass replace=True"):
        register_decoder("mine", CountingPil)
    with pytest.raises(ValueError, match="lowercase identifier"):
        register_decoder("My Decoder", CountingPil)
    with pytest.raises(TypeError, match="Decoder subclass or a callable"):
        register_decoder("other", CountingPil())
    with pytest.raises(ValueError, match="not a registered user decoder"):
        unregister_decoder("pil")


# -- engine and decoder ----------------------------------------------------------------------

def test_auto_on_a_cpu_is_the_worker_engine_with_the_best_strict_decoder():
    chosen = resolve_engine_and_decoder("auto", "auto", "cpu")
    assert chosen.engine is Engine.PROCESSES and chosen.decoder_name == "nvimgcodec" and chosen.decoder.strict
    named = resolve_engine_and_decoder("auto", "opencv", "cuda:0")   # a decoder named: the workers run it
    assert (named.engine, named.decoder_name) == (Engine.PROCESSES, "opencv")
    here = resolve_engine_and_decoder("auto", "auto", "cpu", num_workers=0)   # DataLoader's "in this process"
    assert here.engine is Engine.THREADS
    instance = get_decoder("pil")
    assert resolve_engine_and_decoder("threads", instance, "cpu").decoder is instance


def test_an_engine_with_its_own_decoding_takes_no_decoder():
    with pytest.raises(ValueError, match="engine='dali' decodes in its own pipeline, so decoder='opencv'"):
        resolve_engine_and_decoder("dali", "opencv", "cpu")
    with pytest.raises(BackendUnavailable, match="engine='gpu' decodes on a CUDA device"):
        resolve_engine_and_decoder("gpu", "auto", "cpu")
    with pytest.raises(ValueError, match="engine must be one of 'auto', 'threads', 'processes', 'dali', 'gpu', got 'cpu'"):
        resolve_engine_and_decoder("cpu", "auto", "cpu")


@pytest.mark.dali
def test_the_old_decoder_dali_still_works_and_says_to_use_engine(packed_lmdb):
    with pytest.warns(DeprecationWarning, match="decoder='dali' is deprecated.*pass engine='dali'"):
        loader = FeedLoader(str(packed_lmdb), batch_size=8, size=32, device="cpu", decoder="dali")
    assert (loader.config.engine, loader.config.decoder) == (Engine.DALI, None)
    loader.close()
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="engine='threads' and decoder='dali'"):
        resolve_engine_and_decoder("threads", "dali", "cpu")


def test_auto_never_falls_back_to_a_decoder_blind_to_damage(packed_lmdb):
    """Without simplejpeg, PyTurboJPEG and nvImageCodec, "auto" refuses (OpenCV and Pillow
    would decode damaged data into a wrong image without a word) and says what to install;
    OpenCV asked for by name still works."""
    code = textwrap.dedent(f'''
        import sys
        for name in ("simplejpeg", "turbojpeg", "nvidia.nvimgcodec"):
            sys.modules[name] = None   # as if not installed
        from feedline import FeedLoader
        from feedline.core.errors import BackendUnavailable
        try:
            FeedLoader({str(packed_lmdb)!r}, batch_size=4, size=32, device="cpu")
        except BackendUnavailable as exc:
            print("refused:", exc)
        loader = FeedLoader({str(packed_lmdb)!r}, batch_size=4, size=32, device="cpu", decoder="opencv")
        print("opencv:", next(iter(loader))[0].shape)
    ''')
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    refused, opencv = done.stdout.splitlines()
    assert refused.startswith("refused: no decoder that detects damaged JPEG data is installed")
    assert "pip install simplejpeg" in refused and "decoder='opencv'" in refused
    assert opencv == "opencv: torch.Size([4, 3, 32, 32])"


def test_auto_is_logged_once_and_verify_logs_it_at_debug(packed_lmdb, caplog, monkeypatch):
    monkeypatch.setattr(selection, "_logged", set())
    with caplog.at_level(logging.INFO, logger="feedline"):
        assert verify(str(packed_lmdb), jobs=1).ok
        assert not [r for r in caplog.records if "'auto'" in r.getMessage()]   # `feedline verify`: quiet
        for _ in range(2):
            FeedLoader(str(packed_lmdb), batch_size=8, size=32, device="cpu").close()
    lines = [r for r in caplog.records if "'auto'" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.INFO and "-> 'nvimgcodec'" in lines[0].getMessage()
