import gzip
import time

import numpy as np
import pytest

import mgpu
from helpers import write_idx
from mgpu.data import DataError, find_data_dir, read_idx


def test_real_fashion_mnist(real_data_dir):
    t = time.perf_counter()
    ds = mgpu.load_fashion_mnist(data_dir=real_data_dir)
    elapsed = time.perf_counter() - t
    assert ds.train_images.shape == (60000, 1, 28, 28) and ds.train_images.dtype == np.uint8
    assert ds.test_images.shape == (10000, 1, 28, 28)
    assert np.bincount(ds.train_labels).tolist() == [6000] * 10
    assert np.bincount(ds.test_labels).tolist() == [1000] * 10
    print(f"loaded Fashion-MNIST in {elapsed:.2f} s")  # the target (< 1 s) is checked by bench


def test_subset_is_random_and_reproducible(real_data_dir):
    a = mgpu.load_fashion_mnist(subset=500, test_subset=100, seed=3, data_dir=real_data_dir)
    b = mgpu.load_fashion_mnist(subset=500, test_subset=100, seed=3, data_dir=real_data_dir)
    assert a.train_images.shape == (500, 1, 28, 28) and len(a.test_labels) == 100
    np.testing.assert_array_equal(a.train_labels, b.train_labels)
    assert len(set(a.train_labels.tolist())) == 10  # a sample, not the first 500
    with pytest.raises(DataError, match="subset=70000 is out of range"):
        mgpu.load_fashion_mnist(subset=70000, data_dir=real_data_dir)


def test_small_idx_files(idx_dir):
    ds = mgpu.load_fashion_mnist(data_dir=idx_dir)
    assert ds.train_images.shape == (40, 1, 28, 28) and ds.test_labels.shape == (20,)
    assert ds.source == idx_dir


def test_raw_idx_files_also_work(tmp_path):
    write_idx(tmp_path / "x-idx1-ubyte", np.arange(5), gz=False)
    assert read_idx(tmp_path / "x-idx1-ubyte").tolist() == [0, 1, 2, 3, 4]


def test_search_order_prefers_mgpu_data_dir(idx_dir, monkeypatch):
    monkeypatch.setenv("MGPU_DATA_DIR", str(idx_dir))
    assert find_data_dir(download=False) == idx_dir
    assert mgpu.data.data_dirs()[0] == idx_dir


def test_missing_data_names_every_place(tmp_path, monkeypatch):
    monkeypatch.delenv("MGPU_DATA_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    places = [tmp_path, tmp_path / ".mxnet", tmp_path / "d"]
    monkeypatch.setattr(mgpu.data, "data_dirs", lambda name="fashion-mnist": places)
    with pytest.raises(DataError) as err:
        find_data_dir(download=False)
    msg = str(err.value)
    assert str(tmp_path) in msg and "apt-get install dataset-fashion-mnist" in msg


def test_missing_file_in_explicit_dir(idx_dir):
    (idx_dir / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(DataError, match="missing t10k-labels-idx1-ubyte"):
        mgpu.load_fashion_mnist(data_dir=idx_dir)


def test_truncated_gzip_names_the_file(idx_dir):
    f = idx_dir / "train-images-idx3-ubyte.gz"
    f.write_bytes(f.read_bytes()[:500])
    with pytest.raises(DataError, match=r"train-images-idx3-ubyte.gz is not a readable gzip"):
        mgpu.load_fashion_mnist(data_dir=idx_dir)


def test_truncated_payload_names_the_file(idx_dir):
    f = idx_dir / "train-images-idx3-ubyte.gz"
    raw = gzip.decompress(f.read_bytes())
    f.write_bytes(gzip.compress(raw[:-100]))
    with pytest.raises(DataError, match=r"train-images-idx3-ubyte.gz has \d+ bytes .* truncated"):
        mgpu.load_fashion_mnist(data_dir=idx_dir)


def test_not_an_idx_file(idx_dir):
    (idx_dir / "train-labels-idx1-ubyte.gz").write_bytes(gzip.compress(b"<html>oops</html>"))
    with pytest.raises(DataError, match="not an IDX file"):
        mgpu.load_fashion_mnist(data_dir=idx_dir)


def test_images_and_labels_must_match(idx_dir):
    write_idx(idx_dir / "train-labels-idx1-ubyte.gz", np.zeros(39))
    with pytest.raises(DataError, match=r"train images \(40, 28, 28\) and labels \(39,\)"):
        mgpu.load_fashion_mnist(data_dir=idx_dir)


def test_iter_batches_keeps_short_last_batch():
    X, y = np.zeros((60000 % 256 + 512, 1, 2, 2), np.uint8), np.zeros(60000 % 256 + 512)
    sizes = [len(b) for _, b in mgpu.iter_batches(X, y, 256, shuffle=True, seed=0)]
    assert sizes == [256, 256, 96]
    batches = list(mgpu.iter_batches(X, y, 256, shuffle=True, seed=1))
    assert batches[0][0].dtype == np.float32
    with pytest.raises(ValueError, match="batch_size"):
        next(mgpu.iter_batches(X, y, 0))


def test_labels_outside_the_classes_are_refused(idx_dir):
    write_idx(idx_dir / "t10k-labels-idx1-ubyte.gz", np.full(20, 12))
    with pytest.raises(DataError, match=r"t10k-labels-idx1-ubyte\.gz holds 20 labels outside "
                                        r"0\.\.9 \(e\.g\. \[12\]\).*delete it"):
        mgpu.load_fashion_mnist(data_dir=idx_dir)
