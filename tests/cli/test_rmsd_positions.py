"""``h5mdx rmsd`` of a file whose positions it cannot use (none, no frame, text): one
line naming the file and the H5MD path, exit status 1, said before a scheduler starts,
and no --debug hint after a message that says all there is."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

import h5mdx  # noqa: F401 - registers ds.md
from h5mdx.cli import main
from h5mdx.errors import H5MDConformanceWarning, ParticleOrderWarning, PositionsError
from h5mdx.testing import write_h5md


def _sampling(frames: int) -> dict:
    return {"step": np.arange(frames), "time": np.arange(frames) * 0.5}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("rmsd_positions")
    pos = np.random.default_rng(3).random((4, 5, 3))
    return {
        "velocity": write_h5md(d / "velocity.h5md", {"all": {"velocity": {
            "value": pos, **_sampling(4)}}}),
        "empty": write_h5md(d / "empty.h5md", {"all": {"position": {
            "value": np.zeros((0, 5, 3)), **_sampling(0)}}}),
        "text": write_h5md(d / "text.h5md", {"all": {"position": {
            "value": np.full((4, 5, 3), b"1.5x", dtype="S4"), **_sampling(4)}}}),
        "2-D": write_h5md(d / "plane.h5md", {"all": {"position": {
            "value": pos[..., :2], **_sampling(4)}}}),
        "no atoms": write_h5md(d / "no_atoms.h5md", {"all": {"position": {
            "value": np.zeros((4, 0, 3)), **_sampling(4)}}}),
        "order": write_h5md(d / "order.h5md", {"all": {
            "position": {"value": pos, **_sampling(4)},
            "id": {"value": np.array([[0, 1, 2, 3, 4], [1, 0, 2, 3, 4]] * 2),
                   **_sampling(4)}}}),
    }


def test_a_group_without_positions_is_one_line_without_the_debug_hint(files, capsys):
    """A file of velocities alone said 'scheduler threads (no position to read)', then
    its (complete) error and '(run with --debug for the traceback)'."""
    path = files["velocity"]
    assert main(["rmsd", path, "--no-progress"]) == 1
    captured = capsys.readouterr()
    assert captured.err == ("h5mdx rmsd: error: ds.md.rmsd needs a 'position' variable on "
                            f"(time, atom, spatial): {path} [/particles/all] holds "
                            "velocity, no position\n")
    assert captured.out == ""
    with xr.open_dataset(path, engine="h5md") as ds, \
            pytest.raises(PositionsError, match="holds velocity, no position") as err:
        ds.md.rmsd()
    assert isinstance(err.value, ValueError)  # as before the class


def test_a_file_of_no_frames_is_refused_before_a_scheduler_starts(files, capsys):
    """A file of no frames started a local cluster of worker processes, then said 'hold
    no frames' with the --debug hint."""
    path = files["empty"]
    assert main(["rmsd", path, "--no-progress"]) == 1
    captured = capsys.readouterr()
    assert captured.err == (f"h5mdx rmsd: error: the positions (of {path} "
                            "[/particles/all/position]) hold no frames (an empty time "
                            "slice, or a file written before its first frame): there is "
                            "no reference frame\n")
    assert captured.out == ""
    with xr.open_dataset(path, engine="h5md") as ds, \
            pytest.raises(PositionsError, match="hold no frames") as err:
        ds.md.rmsd()
    assert isinstance(err.value, ValueError)


def test_text_positions_are_refused_before_the_first_read(files, capsys):
    """Positions stored as text failed at the reference frame's read: 'cannot read the
    reference frame 0: ValueError: could not convert string to float', with the --debug
    hint. They are refused before any read, naming the file, the H5MD path and the dtype."""
    path = files["text"]
    with pytest.warns(H5MDConformanceWarning, match="holds text"):
        assert main(["rmsd", path, "--no-progress"]) == 1
    captured = capsys.readouterr()
    assert captured.err == ("h5mdx rmsd: error: rmsd needs positions that are numbers; "
                            f"'position' (of {path} [/particles/all/position]) holds text "
                            "(dtype <U4)\n")
    assert captured.out == ""
    with pytest.warns(H5MDConformanceWarning, match="holds text"):
        ds = xr.open_dataset(path, engine="h5md")
    with ds, pytest.raises(PositionsError, match=r"holds text \(dtype <U4\)") as err:
        ds.md.rmsd(reference=np.zeros((5, 3)))  # refused with no frame read, too
    assert isinstance(err.value, ValueError)


@pytest.mark.parametrize("name, said", [
    ("2-D", "rmsd needs 3 spatial dimensions, not 2 (of {path} [/particles/all/position]): "
            "the RMSD after superposition in 3-D"),
    ("no atoms", "rmsd needs atoms to compare; the positions (of {path} "
                 "[/particles/all/position]) hold none"),
    ("order", "rmsd needs each atom in one slot in every frame; 'position' is served "),
])
def test_positions_the_rmsd_cannot_use_are_one_line_before_a_scheduler(files, capsys, name,
                                                                       said):
    """Positions in 2-D were said after the scheduler was chosen; those and positions of
    no atom, or in another order in some frames (ESPResSo), ended with the --debug hint
    after their complete message."""
    import contextlib

    path = files[name]
    expect = pytest.warns(ParticleOrderWarning) if name == "order" else \
        contextlib.nullcontext()
    with expect:
        assert main(["rmsd", path, "--no-progress"]) == 1
    captured = capsys.readouterr()
    assert captured.err.startswith("h5mdx rmsd: error: " + said.format(path=path))
    assert captured.err.count("\n") == 1 and "--debug" not in captured.err
    assert captured.out == ""
