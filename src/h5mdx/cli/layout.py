"""``h5mdx convert`` and ``h5mdx rechunk``: get a trajectory into a good layout."""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from h5mdx.format.compression import COMPRESSION_SYNTAX

_LAYOUT_HELP = (
    "Layout: chunks of whole frames, --frames-per-chunk N or --chunk-mib M (default about "
    "4 MiB per chunk), or --contiguous; --compression none|gzip[:LEVEL]|lzf|blosc[:CODEC[:L]]|"
    "zstd[:L] (blosc/zstd need hdf5plugin; gzip and zstd go after HDF5's byte shuffle, "
    "blosc shuffles itself). The output appears under its name only when "
    "complete; an interrupted run leaves no partial output."
)


def _frames(text: str) -> int:
    """A ``--frames-per-chunk`` or ``--step``: a whole number >= 1 (a usage error
    otherwise, exit 2)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, not {value}")
    return value


def _mib(text: str) -> float:
    """A size in MiB: a finite number > 0, at most 1 TiB."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of MiB, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, not {text}")
    from h5mdx.cli._usage import mib_problem

    problem = mib_problem(value)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return value


def _compression(text: str) -> str:
    """A ``--compression`` spec, read as the writers read it: checked before any work."""
    from h5mdx.format.compression import parse_compression

    try:
        parse_compression(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


#: What rechunk's compression is by default
_KEPT = ("keep the input filters; into Zarr, the positions' gzip, zstd or blosc at their "
         "level")


def _layout_options(p: argparse.ArgumentParser, compression_default: str | None) -> None:
    g = p.add_argument_group("layout")
    m = g.add_mutually_exclusive_group()
    m.add_argument("--frames-per-chunk", type=_frames, metavar="N", help="frames per chunk")
    m.add_argument("--chunk-mib", type=_mib, metavar="M",
                   help="target chunk size in MiB (whole frames)")
    m.add_argument("--contiguous", action="store_true", help="no chunks")
    g.add_argument("--compression", default=compression_default, metavar="SPEC",
                   type=_compression,
                   help=f"{COMPRESSION_SYNTAX} "
                        f"(default: {compression_default or _KEPT})")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output")
    p.add_argument("--verify", action="store_true",
                   help="re-read the output and compare per-element checksums")
    p.add_argument("--no-progress", dest="progress", action="store_false",
                   help="no progress bar")
    p.add_argument("--json", action="store_true", help="print the statistics as JSON")


def add_parser(subparsers: Any) -> None:
    """Register ``convert`` and ``rechunk``."""
    c = subparsers.add_parser(
        "convert",
        usage="%(prog)s [-h] [options] topology [TRAJ ...] OUT",
        help="convert any trajectory MDAnalysis reads to H5MD (or Zarr: OUT.zarr)",
        description="Convert a trajectory (DCD, XTC, TRR, NetCDF, H5MD, multi-frame PDB, "
                    "...) to H5MD 1.1, or to Zarr when OUT ends in .zarr. Several trajectory "
                    "files are concatenated in order. " + _LAYOUT_HELP,
    )
    c.add_argument("topology", help="topology file (PSF, PDB, GRO, TPR, PRMTOP, ...)")
    c.add_argument("paths", nargs="+", metavar="[TRAJ ...] OUT",
                   help="trajectory file(s), then the output (.h5md or .zarr); with only OUT "
                        "the topology's own frames are converted")
    c.add_argument("--select", help="MDAnalysis selection of the atoms to write")
    c.add_argument("--partial", action="store_true",
                   help="convert the frames before a damaged or cut end of an input (a run "
                        "that crashed while writing), with a warning, instead of refusing it")
    c.add_argument("--start", type=int, help="first frame to convert (default: 0)")
    c.add_argument("--stop", type=int, help="frame to stop before (default: the end)")
    c.add_argument("--step", type=_frames, help="convert every STEP-th frame (default: 1)")
    c.add_argument("--group", default="trajectory", help="particles group name")
    c.add_argument("--format", dest="fmt", metavar="FMT",
                   help="trajectory format where MDAnalysis cannot tell it from the file name "
                        "(e.g. LAMMPSDUMP for a .lammpstrj, HISTORY, XYZ)")
    c.add_argument("--topology-format", metavar="FMT",
                   help="topology format where MDAnalysis cannot tell it from the file name "
                        "(e.g. DATA, PDB, CONFIG)")
    for name in ("velocities", "forces"):
        v = c.add_mutually_exclusive_group()
        v.add_argument(f"--{name}", dest=name, action="store_true", default=None,
                       help=f"write {name} (error if absent); default: when present")
        v.add_argument(f"--no-{name}", dest=name, action="store_false",
                       help=f"do not write {name}")
    _layout_options(c, "none")
    # positionals after an option belong to `paths` (h5mdx.cli.main)
    c.set_defaults(func=run, trailing_positionals="paths")

    r = subparsers.add_parser(
        "rechunk",
        help="rewrite an H5MD file with a new chunk layout/compression (or to Zarr)",
        description="Copy an H5MD file keeping every group, attribute and link, with a new "
                    "layout for its time-dependent elements (and a --compression for every "
                    "dataset of rows, step, time and parameters too). " + _LAYOUT_HELP,
    )
    r.add_argument("input", help="H5MD file")
    r.add_argument("output", help="new H5MD file, or OUT.zarr")
    r.add_argument("--buffer-mib", type=_mib, default=64.0,
                   help="MiB of frames read at a time (default 64): with the input's chunk "
                        "cache, about what the copy holds in memory (a few such blocks "
                        "for a Zarr output)")
    _layout_options(r, None)
    r.set_defaults(func=run)


def _output_problem(out: str, command: str, inputs: list[str], overwrite: bool
                    ) -> str | None:
    """Why ``out`` cannot be written (None: it can), before any input is read: named as
    no file the command writes (OUT.txt), one of the ``inputs``, in a directory that does
    not exist, or a kind --overwrite may not replace (the library's checks: said with
    exit status 1 and a --debug hint, as failures), or, by the check of h5mdx rmsd's
    outputs, where it cannot be written (an output in /proc failed after the inputs were
    read, in HDF5's words, naming the temporary file). An existing
    output without --overwrite is left to the command, which says it its own way."""
    from pathlib import Path

    from h5mdx.analysis.series import check_writable
    from h5mdx.layout._atomic import check_target
    from h5mdx.layout.convert import _check_output_name, is_zarr_path

    path, zarr = Path(out), is_zarr_path(out)
    try:
        _check_output_name(out, zarr, command == "rechunk" or len(inputs) > 1, command)
        check_target(out, overwrite=overwrite, inputs=inputs, directory=zarr, hdf5=not zarr)
    except FileExistsError:
        pass
    except ValueError as err:
        return str(err)
    try:  # a Zarr store there already (--overwrite) is a directory: a file in it
        check_writable(path / "zarr.json" if is_zarr_path(out) and path.is_dir() else path,
                       "the output")
    except (ValueError, PermissionError) as err:
        return str(err)
    return None


def _no_frames(err: Any) -> Exception:
    """A usage error saying that --start, --stop and --step select no frames, in the
    command's terms: it said 'start=50, stop=10, step=None', with exit status 1 and a
    --debug hint."""
    from h5mdx.cli._usage import UsageError

    given = [f"--{name} {value}" for name, value in
             (("start", err.start), ("stop", err.stop), ("step", err.step))
             if value is not None]
    if not given:  # a trajectory of no frames: no option to blame
        return ValueError(f"{err.args[0]}: nothing to convert")
    n = err.n_frames
    frames = f"{n} frame{'s' if n != 1 else ''}" + (f" (0 to {n - 1}; negative values count "
                                                  "from the end)" if n else "")
    return UsageError(f"{' '.join(given)} select{'s' if len(given) == 1 else ''} no frames: "
                      f"the trajectory has {frames}")


def run(args: argparse.Namespace) -> int:
    """Run ``convert`` or ``rechunk``."""
    from h5mdx.format.compression import parse_compression

    if args.contiguous and parse_compression(args.compression).codec != "none":
        # said by the writer after the inputs were read, exit status 1
        print(f"h5mdx {args.command}: --contiguous and --compression {args.compression}: "
              "HDF5 compresses chunked data only; drop --contiguous or --compression",
              file=sys.stderr)
        return 2
    if args.command == "convert":
        out, inputs = args.paths[-1], [args.topology, *args.paths[:-1]]
    else:
        out, inputs = args.output, [args.input]
    problem = _output_problem(out, args.command, inputs, args.overwrite)
    if problem:
        print(f"h5mdx {args.command}: {problem}", file=sys.stderr)
        return 2
    layout = {
        "frames_per_chunk": args.frames_per_chunk,
        "chunk_mib": args.chunk_mib,
        "contiguous": args.contiguous,
        "compression": args.compression,
        "overwrite": args.overwrite,
        "verify": args.verify,
    }
    # the bars are drawn on stdout: asked of stderr, a run from a terminal with stdout
    # redirected (--json > stats.json) wrote the bar into the file, before the JSON
    progress = args.progress and sys.stdout.isatty()
    if args.command == "convert":
        from h5mdx.layout.convert import NoFramesError, convert

        *trajs, out = args.paths
        try:
            stats = convert(args.topology, trajs, out, select=args.select, start=args.start,
                            stop=args.stop, step=args.step, velocities=args.velocities,
                            forces=args.forces, group=args.group, progress=progress,
                            format=args.fmt, topology_format=args.topology_format,
                            partial=args.partial, **layout)
        except NoFramesError as err:
            raise _no_frames(err) from None
    else:
        from h5mdx.layout.rechunk import rechunk

        stats = rechunk(args.input, args.output, buffer_mib=args.buffer_mib,
                        progress=progress, **layout)
    if args.json:
        print(json.dumps(stats.as_dict(), indent=2))
    else:
        print(stats.summary())
        if stats.steps_renumbered:
            print("note: the input steps were not increasing (e.g. concatenated runs that "
                  "restart at 0); later steps and times continue from the previous ones")
        for note in getattr(stats, "notes", []):
            print(f"note: {note}")
        for name, count in stats.missing.items():  # a box as zeros: convert warns
            if name != "box_edges":
                print(f"note: {count} frames had no {name}; written as NaN")
    return 0
