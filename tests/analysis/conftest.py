"""Fixtures of the RMSD read paths' tests: the adk trajectory stored every way they read
(or must leave to another path), and MDAnalysis' RMSD of it."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from MDAnalysis.analysis import rms

from rmsd_layouts import write_positions


@pytest.fixture(scope="session")
def expected(adk_universe):
    """MDAnalysis' RMSD of adk to its first frame, C-alpha and all atoms."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {sel: rms.RMSD(adk_universe, select=sel).run().results.rmsd[:, 2]
                for sel in ("name CA", "all")}


@pytest.fixture(scope="session")
def layouts(tmp_path_factory, adk_h5md, adk_h5md_blocked, adk_positions):
    """Every stored layout the compiled read paths (fused, mapped) take, and some they
    must leave to the ordinary path."""
    d = tmp_path_factory.mktemp("layouts")
    return {
        "one-frame chunks (MDAnalysis)": adk_h5md,
        "10-frame chunks": adk_h5md_blocked,
        "contiguous": write_positions(d / "contig.h5md", adk_positions),
        "contiguous float64": write_positions(d / "contig64.h5md",
                                              adk_positions.astype(np.float64)),
        # 7 frames a chunk: the last chunk (98 = 14 x 7) and reads end mid-chunk
        "7-frame chunks": write_positions(d / "c7.h5md", adk_positions, chunks=(7, 3341, 3)),
        "gzip": write_positions(d / "gzip.h5md", adk_positions, chunks=(10, 3341, 3),
                                compression="gzip"),
        "atoms split": write_positions(d / "split.h5md", adk_positions,
                                       chunks=(10, 1000, 3)),
    }
