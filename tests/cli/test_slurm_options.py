"""One set of SLURM option names for every command (``rmsd --scheduler slurm``,
``slurm-script``), with the old spellings as aliases."""

from __future__ import annotations

import shlex

import pytest

from h5mdx.cli import build_parser, main
from h5mdx.cli.slurm import _split

SHARED = {"walltime": "00:07:00", "queue": "q", "account": "acc", "wait_timeout": 5.0}


@pytest.mark.parametrize("names", [
    ("--walltime", "--queue", "--account", "--wait-timeout"),
    ("--time", "--partition", "--account", "--timeout"),
])
@pytest.mark.parametrize("command", [["rmsd", "x.h5md"], ["slurm-script", "mpi-rmsd"]])
def test_same_names_same_destinations(command, names):
    argv = list(command)
    for name, value in zip(names, SHARED.values(), strict=True):
        argv += [name, str(value)]
    args = build_parser().parse_args(argv)
    if command[0] == "slurm-script":  # its options may follow the program's arguments
        args, rest = _split(args)
        assert rest == []
    for dest, value in SHARED.items():
        assert getattr(args, dest) == value


def test_slurm_script_takes_the_shared_names_after_the_program_arguments(capsys, tmp_path,
                                                                        monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.h5md").touch()
    assert main(["slurm-script", "mpi-rmsd", "x.h5md", "--ntasks", "2",
                 "--walltime", "00:06:00", "--queue", "q2"]) == 0
    script = capsys.readouterr().out
    assert "#SBATCH --time=00:06:00" in script
    assert "#SBATCH --partition=q2" in script


def test_slurm_script_warns_of_a_trajectory_the_job_will_not_find(tmp_path, monkeypatch, capsys):
    """The script was written without a word, and the job failed in the queue (found by
    an audit)."""
    monkeypatch.chdir(tmp_path)
    with pytest.warns(UserWarning, match=r"the trajectory 'nope.h5md' does not exist \(seen "
                      rf"from {tmp_path}, where the job starts\)"):
        assert main(["slurm-script", "mpi-rmsd", "nope.h5md", "--ntasks", "2"]) == 0
    assert "h5mdx mpi-rmsd nope.h5md" in capsys.readouterr().out


def test_slurm_script_refuses_a_time_slurm_does_not_take(tmp_path, monkeypatch, capsys):
    """--walltime abc was written into the script as '#SBATCH --time=abc' (sbatch refuses
    it at submission), where rmsd --scheduler slurm checks the same option."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.h5md").touch()
    for bad in ("abc", "25:00:00:00"):
        assert main(["slurm-script", "mpi-rmsd", "x.h5md", "--ntasks", "2",
                     "--walltime", bad]) == 2
        captured = capsys.readouterr()
        assert "#SBATCH" not in captured.out
        assert captured.err == (f"h5mdx slurm-script: --walltime {bad!r} is not a SLURM "
                                "time: use 'MM', 'HH:MM:SS', 'D-HH' or 'D-HH:MM:SS' (or "
                                "UNLIMITED), e.g. --walltime 00:30:00\n")
    assert main(["slurm-script", "mpi-rmsd", "x.h5md", "--ntasks", "2", "--time", "1-12"]) == 0
    assert "#SBATCH --time=1-12" in capsys.readouterr().out


@pytest.mark.parametrize("spelling", [["-qo", "res"], ["--ou", "res"], ["-q", "-ores"]])
def test_slurm_script_keeps_an_out_however_spelt(spelling, tmp_path, monkeypatch, capsys):
    """mpi-rmsd takes -qo DIR and --ou DIR as --out DIR; the script did not see them, added
    its default --out after them, which won: the job wrote elsewhere and --submit found no
    records in DIR."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.h5md").touch()
    assert main(["slurm-script", "mpi-rmsd", "x.h5md", "--ntasks", "2", *spelling]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("mpirun"))
    words = shlex.split(line)
    args = build_parser().parse_args(words[words.index("mpi-rmsd"):])
    assert args.out == "res"
    assert "h5mdx-mpi-rmsd-" not in line


@pytest.mark.parametrize(("state", "code", "records_job", "rc"), [
    ("FAILED", 1, "4241", 1),  # an earlier run's records, left in --out
    ("COMPLETED", 0, "4242", 0),
])
def test_slurm_script_submit_summarises_only_this_jobs_records(state, code, records_job, rc,
                                                               tmp_path, monkeypatch, capsys):
    """A job that failed before its run wrote nothing, and --submit printed the straggler
    summary of the records an earlier run left in --out, as this job's (found by an
    audit)."""
    from types import SimpleNamespace

    import h5mdx.parallel.batch as batch
    from h5mdx.mpi.decompose import Block
    from h5mdx.mpi.rmsd import _record, save_records
    from h5mdx.timing.records import run_metadata

    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.h5md").touch()
    monkeypatch.setenv("SLURM_JOB_ID", records_job)
    comm = SimpleNamespace(Get_rank=lambda: 0, Get_size=lambda: 1)
    record = _record("run", comm, Block(0, 0, 5), 0.0, 1.0, {"io": 1.0}, 100)
    save_records([record], tmp_path / "res",
                 run_metadata(backend="mpi-io", n_workers=1, run_id="run", file="x.h5md"))
    monkeypatch.setattr(batch, "submit", lambda script, cwd=None: "4242")
    monkeypatch.setattr(batch, "wait_for_job", lambda job_id, timeout=None: batch.JobResult(
        job_id, state, code, "", 1.0, {}))
    assert main(["slurm-script", "mpi-rmsd", "x.h5md", "--ntasks", "1", "--out", "res",
                 "--submit"]) == rc
    captured = capsys.readouterr()
    if rc:
        assert "stragglers" not in captured.out
        assert (f"the timing records in {tmp_path / 'res'} are not job 4242's but an earlier "
                "run's") in captured.err
    else:
        assert "stragglers" in captured.out and "not job" not in captured.err


def test_slurm_script_quotes_sbatch_values_with_spaces(capsys, tmp_path, monkeypatch):
    """sbatch splits an #SBATCH line at whitespace and ends it at an unquoted '#', and
    takes double quotes and backslashes: '--chdir=/work/my run' was written as it is, and
    sbatch refused the script ('Invalid directive found in batch script: run'); a '#' cut
    the log's name short."""
    import shutil
    import subprocess

    run_dir = tmp_path / 'my "run" #2'
    run_dir.mkdir()
    monkeypatch.chdir(run_dir)
    (run_dir / "x.h5md").touch()
    assert main(["slurm-script", "mpi-rmsd", "x.h5md", "--ntasks", "2",
                 "--job-name", "my job", "--log", "log #%j.out",
                 "--sbatch=--comment=a b", "--sbatch=--exclusive"]) == 0
    script = capsys.readouterr().out
    words = {}
    for line in script.splitlines():
        if line.startswith("#SBATCH "):
            # sbatch's rules for these lines: POSIX shell words, '#' starts a comment
            for word in shlex.split(line[len("#SBATCH "):], comments=True):
                key, _, value = word.partition("=")
                words[key] = value
    assert words["--chdir"] == str(run_dir)
    assert words["--job-name"] == "my job"
    assert words["--output"] == "log #%j.out"
    assert words["--comment"] == "a b" and "--exclusive" in words  # --sbatch's too
    if shutil.which("sbatch"):  # SLURM's own parser (--test-only: never a job)
        path = tmp_path / "job.sh"
        path.write_text(script)
        said = subprocess.run(["sbatch", "-vv", "--test-only", str(path)], check=False,
                              capture_output=True, text=True, timeout=60).stderr
        assert "Invalid directive" not in said
        assert f"chdir               : {run_dir}\n" in said
    assert main(["slurm-script", "mpi-rmsd", "x.h5md", "--ntasks", "2",
                 "--job-name", "a\nb"]) != 0
    captured = capsys.readouterr()
    assert "holds a line break" in captured.err and "#SBATCH" not in captured.out
    # a line break in --sbatch began a line of shell in the script
    assert main(["slurm-script", "mpi-rmsd", "x.h5md", "--ntasks", "2",
                 "--sbatch=--comment=x\nrm -rf ~"]) != 0
    captured = capsys.readouterr()
    assert "holds a line break" in captured.err and "rm -rf" not in captured.out


@pytest.mark.parametrize(("log", "name"), [
    ("%x-%j.out", "rmsd run-4242.out"),
    ("logs/%u_%8j_100%%.log", "logs/{user}_00004242_100%.log"),
    ("h5mdx-mpi-rmsd-%j.out", "h5mdx-mpi-rmsd-4242.out"),
])
def test_slurm_script_submit_reads_the_log_sbatch_names(log, name, tmp_path, monkeypatch,
                                                        capsys):
    """--submit looked for the job's output with only %j replaced: --log %x-%j.out (the
    job's name) made it print nothing of the job and name '%x-4242.out', a file that
    does not exist."""
    import getpass

    import h5mdx.parallel.batch as batch

    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.h5md").touch()
    (tmp_path / "logs").mkdir()
    written = tmp_path / name.format(user=getpass.getuser())
    written.write_text("the job's own words\n")
    monkeypatch.setattr(batch, "submit", lambda script, cwd=None: "4242")
    monkeypatch.setattr(batch, "wait_for_job", lambda job_id, timeout=None: batch.JobResult(
        job_id, "FAILED", 1, "", 1.0, {}))
    main(["slurm-script", "mpi-rmsd", "x.h5md", "--ntasks", "1", "--job-name", "rmsd run",
          "--log", log, "--submit"])
    out = capsys.readouterr().out
    assert "the job's own words" in out
    assert f"output in {written}" in out


def test_slurm_script_says_a_chdir_that_is_no_directory(tmp_path, monkeypatch, capsys):
    """--submit with a --chdir that does not exist failed with a bare '[Errno 2] No such
    file or directory: DIR', naming no option; the script was written without a word."""
    import h5mdx.parallel.batch as batch

    submitted = []
    monkeypatch.setattr(batch, "submit", lambda script, cwd=None: submitted.append(cwd))
    missing = tmp_path / "nope"
    assert main(["slurm-script", "mpi-rmsd", "x.h5md", "--ntasks", "2", "--chdir",
                 str(missing), "--submit"]) != 0
    assert f"--chdir {missing}: no such directory, where the job would start" in \
        capsys.readouterr().err
    assert submitted == []
    with pytest.warns(UserWarning) as caught:  # and of the trajectory, not there either
        assert main(["slurm-script", "mpi-rmsd", "x.h5md", "--ntasks", "2", "--chdir",
                     str(missing)]) == 0
    assert str(caught[0].message) == (f"--chdir {missing}: no such directory, where the job "
                                      "would start; the job will fail unless it exists when "
                                      "it runs")
    assert f"#SBATCH --chdir={missing}" in capsys.readouterr().out


def test_slurm_script_names_mpirun_args_it_cannot_split(tmp_path, monkeypatch, capsys):
    """--mpirun-args with an unclosed quote failed saying only 'No closing quotation'."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.h5md").touch()
    assert main(["slurm-script", "mpi-rmsd", "x.h5md", "--ntasks", "2",
                 "--mpirun-args", "--bind-to 'none"]) != 0
    captured = capsys.readouterr()
    assert "--mpirun-args \"--bind-to 'none\": No closing quotation" in captured.err
    assert "#SBATCH" not in captured.out
    assert main(["slurm-script", "mpi-rmsd", "x.h5md", "--ntasks", "2",
                 "--mpirun-args", "--bind-to 'core x'"]) == 0
    assert "mpirun -n 2 --bind-to 'core x' " in capsys.readouterr().out


def test_slurm_script_takes_a_launcher_with_its_options(tmp_path, monkeypatch, capsys):
    """--mpirun "srun --mpi=pmix" was quoted as one command name ('srun --mpi=pmix' -n 2
    ...: 'command not found' in the job); a launcher at a path with a space
    stays one word."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.h5md").touch()
    assert main(["slurm-script", "mpi-rmsd", "x.h5md", "--ntasks", "2",
                 "--mpirun", "srun --mpi=pmix"]) == 0
    assert "\nsrun --mpi=pmix -n 2 " in capsys.readouterr().out
    launcher = tmp_path / "my mpi" / "mpirun"
    launcher.parent.mkdir()
    launcher.touch()
    assert main(["slurm-script", "mpi-rmsd", "x.h5md", "--ntasks", "2",
                 "--mpirun", str(launcher)]) == 0
    assert f"\n'{launcher}' -n 2 " in capsys.readouterr().out


@pytest.mark.parametrize(("options", "said"), [
    ([], "--ntasks N is required: the number of MPI ranks of the job"),
    (["--ntasks", "0"], "--ntasks must be at least 1, not 0"),
    (["--ntasks", "-3"], "--ntasks must be at least 1, not -3"),
    (["--ntasks", "2", "--nodes", "0"], "--nodes must be at least 1, not 0"),
    (["--ntasks", "2", "--mem-per-cpu", "4GiB"],
     "--mem-per-cpu '4GiB' is not a SLURM memory size: a whole number with K, M, G or T "
     "(megabytes without), e.g. 2G or 2GB"),
    (["--ntasks", "2", "--wait-timeout", "-5"],
     "--wait-timeout must be a positive number of seconds, not -5"),
    (["--ntasks", "2", "--mpirun-args", "'a"],
     "--mpirun-args \"'a\": No closing quotation (the launcher's options are split as the "
     "shell splits words)"),
])
def test_slurm_script_option_values_are_usage_errors(options, said, tmp_path, monkeypatch,
                                                     capsys):
    """A zero or negative count, a memory size or a launcher option SLURM or the shell
    does not take exited with status 1 and a --debug hint, as a failure of the run; they
    are usage errors (exit 2), one line naming the option, as other subcommands say."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.h5md").touch()
    assert main(["slurm-script", "mpi-rmsd", "x.h5md", *options]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"h5mdx slurm-script: {said}\n" and captured.out == ""


def test_slurm_script_refuses_more_nodes_than_tasks(tmp_path, monkeypatch, capsys):
    """--nodes 4 --ntasks 2 was written into the script, and sbatch refused the job at
    submission; it is refused first (exit 2), naming both options."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.h5md").touch()
    assert main(["slurm-script", "mpi-rmsd", "x.h5md", "--nodes", "4", "--ntasks", "2"]) == 2
    captured = capsys.readouterr()
    assert captured.err == ("h5mdx slurm-script: --nodes 4 is more than --ntasks 2: each "
                            "node runs at least one of the job's tasks; give --nodes at "
                            "most 2\n") and captured.out == ""
    assert main(["slurm-script", "mpi-rmsd", "x.h5md", "--nodes", "2", "--ntasks", "2"]) == 0
    assert "#SBATCH --nodes=2" in capsys.readouterr().out


def test_slurm_script_refuses_a_program_option_the_job_would_refuse(tmp_path, monkeypatch,
                                                                     capsys):
    """--read-mib 0 was written into the job, whose mpi-rmsd refused it after the job's
    wait in the queue; the script is refused first (exit 2), as mpi-rmsd says it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.h5md").touch()
    assert main(["slurm-script", "mpi-rmsd", "x.h5md", "--ntasks", "2", "--read-mib",
                 "0"]) == 2
    captured = capsys.readouterr()
    assert captured.err == ("h5mdx slurm-script: --read-mib must be a positive, finite "
                            "number of MiB, not 0\n") and captured.out == ""


@pytest.mark.parametrize("option", ["--job-name", "--log", "--partition", "--account"])
def test_slurm_script_names_the_option_holding_a_line_break(option, tmp_path, monkeypatch,
                                                            capsys):
    """--job-name 'a<newline>b' was refused as "'a\\nb' holds a line break", naming no
    option; the option is named."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.h5md").touch()
    assert main(["slurm-script", "mpi-rmsd", "x.h5md", "--ntasks", "2", option,
                 "a\nb"]) == 2
    assert capsys.readouterr().err == (f"h5mdx slurm-script: {option} 'a\\nb' holds a line "
                                       "break, which no #SBATCH line can hold\n")
