"""Done-when (b) of issue 4: a finished checkpoint, read with h5py alone, holds exactly the values
the program returned (RESULTS: raw float64 in input order, written by checkpoint_job).

    /usr/bin/python3 h5py_check.py CHECKPOINT RESULTS N
"""
import sys

import h5py
import numpy as np

path, results_path, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
returned = np.fromfile(results_path, dtype="<f8")
with h5py.File(path, "r") as f:
    attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}
    assert attrs["format"] == "fibra-checkpoint", attrs
    assert attrs["function"] == "work", attrs["function"]
    assert int(attrs["n_inputs"]) == n and int(attrs["n_done"]) == n, (attrs["n_inputs"], attrs["n_done"])
    assert attrs["state"] == "complete" and attrs["element_type"] == "float64", attrs
    stored, done = f["results"][:], f["done"][:]
assert stored.dtype == np.float64 and stored.shape == (n,), (stored.dtype, stored.shape)
assert done.all(), "items not marked done: %d" % (len(done) - done.sum())
assert returned.shape == (n,), returned.shape
assert np.array_equal(stored, returned), "first difference at item %d" % np.flatnonzero(stored != returned)[0]
print("PASS: h5py reads %d float64 results of '%s', identical to what the program returned" % (n, attrs["function"]))
