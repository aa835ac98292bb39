"""run_files' logic (module_utils.run_files): the run directory written on the controller - each
file atomically and only when its content or mode differs, check mode writing nothing, the diff,
and the refusals that name the field."""

from __future__ import annotations

import os
import stat

import pytest

from ansible_collections.gpuops.training.plugins.module_utils.run_files import (
    MAX_DIFF_BYTES,
    RunFilesError,
    write_run_files,
)


def mode_of(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def run_dir_files(run):
    return [
        {"path": "run.json", "content": '{\n    "a": 1\n}\n', "mode": "0644"},
        {"path": "environment.sh", "content": "export TOKEN='s3cret'\n", "mode": "0600"},
    ]


@pytest.fixture
def run(tmp_path):
    return tmp_path / "runs" / "r1"


def test_it_creates_the_directories_and_writes_the_files(run):
    old = os.umask(0o077)
    try:
        result = write_run_files(str(run), [".", "logs", "logs/early"], run_dir_files(run))
    finally:
        os.umask(old)
    assert result["changed"] is True
    created = [run.parent, run, run / "logs", run / "logs" / "early"]
    assert result["directories"] == [str(path) for path in created]
    assert result["files"] == [str(run / "run.json"), str(run / "environment.sh")]
    assert (run / "run.json").read_bytes() == b'{\n    "a": 1\n}\n'
    assert mode_of(run / "run.json") == 0o644
    assert mode_of(run / "environment.sh") == 0o600
    assert all(mode_of(path) == 0o755 for path in (run.parent, run, run / "logs", run / "logs" / "early"))
    # No temporary file is left beside them.
    assert sorted(os.listdir(run)) == ["environment.sh", "logs", "run.json"]
    assert "diff" not in result


def test_a_second_run_changes_nothing(run):
    write_run_files(str(run), [".", "logs"], run_dir_files(run))
    before = {name: os.stat(run / name).st_ino for name in ("run.json", "environment.sh")}
    result = write_run_files(str(run), [".", "logs"], run_dir_files(run), diff=True)
    assert result == {"changed": False, "dest": str(run), "directories": [], "files": [], "diff": []}
    assert {name: os.stat(run / name).st_ino for name in before} == before


def test_new_content_is_written_by_a_rename(run):
    write_run_files(str(run), ["."], run_dir_files(run))
    inode = os.stat(run / "run.json").st_ino
    files = [{"path": "run.json", "content": "{}\n", "mode": "0644"}]
    result = write_run_files(str(run), [], files, diff=True)
    assert result["changed"] is True and result["files"] == [str(run / "run.json")]
    assert (run / "run.json").read_text() == "{}\n"
    assert os.stat(run / "run.json").st_ino != inode
    assert result["diff"] == [
        {
            "before_header": str(run / "run.json"),
            "after_header": str(run / "run.json"),
            "before": '{\n    "a": 1\n}\n',
            "after": "{}\n",
        }
    ]


def test_a_mode_alone_is_set_without_writing(run):
    write_run_files(str(run), ["."], run_dir_files(run))
    inode = os.stat(run / "run.json").st_ino
    files = [{"path": "run.json", "content": '{\n    "a": 1\n}\n', "mode": "0600"}]
    result = write_run_files(str(run), [], files, diff=True)
    assert result["changed"] is True and result["files"] == [str(run / "run.json")]
    assert mode_of(run / "run.json") == 0o600
    assert os.stat(run / "run.json").st_ino == inode
    assert result["diff"][0]["before"] == {"path": str(run / "run.json"), "mode": "0644"}
    assert result["diff"][0]["after"] == {"path": str(run / "run.json"), "mode": "0600"}


def test_a_directory_mode_is_set(run):
    write_run_files(str(run), ["."])
    os.chmod(run, 0o700)
    result = write_run_files(str(run), ["."])
    assert result["changed"] is True and result["directories"] == [str(run)]
    assert mode_of(run) == 0o755
    assert write_run_files(str(run), ["."])["changed"] is False


def test_files_only_leave_the_directory_alone(run):
    write_run_files(str(run), ["."])
    os.chmod(run, 0o700)
    result = write_run_files(str(run), files=[{"path": "launcher.log", "content": "done\n"}])
    assert result["changed"] is True and mode_of(run) == 0o700
    assert mode_of(run / "launcher.log") == 0o644


def test_check_mode_writes_nothing_and_reports_what_would_change(run):
    result = write_run_files(str(run), [".", "logs"], run_dir_files(run), check_mode=True, diff=True)
    assert result["changed"] is True
    assert result["files"] == [str(run / "run.json"), str(run / "environment.sh")]
    assert str(run / "logs") in result["directories"]
    assert not run.parent.exists()
    assert {"before": "", "after": "export TOKEN='s3cret'\n"}.items() <= result["diff"][-1].items()

    write_run_files(str(run), [".", "logs"], run_dir_files(run))
    os.chmod(run / "run.json", 0o600)
    files = [{"path": "run.json", "content": "{}\n", "mode": "0644"}]
    result = write_run_files(str(run), ["."], files, check_mode=True)
    assert result["changed"] is True and result["files"] == [str(run / "run.json")]
    assert (run / "run.json").read_text() == '{\n    "a": 1\n}\n' and mode_of(run / "run.json") == 0o600
    unchanged = write_run_files(str(run), [".", "logs"], run_dir_files(run)[1:], check_mode=True)
    assert unchanged["changed"] is False


def test_content_is_written_byte_for_byte(run):
    content = "żółw \u00e9\r\nno newline at the end\t"
    write_run_files(str(run), ["."], [{"path": "a.txt", "content": content, "mode": "644"}])
    assert (run / "a.txt").read_bytes() == content.encode("utf-8")
    write_run_files(str(run), [], [{"path": "empty", "content": "", "mode": "0644"}])
    assert (run / "empty").read_bytes() == b""


def test_a_large_content_is_not_shown_in_the_diff(run):
    big = "x" * (MAX_DIFF_BYTES + 1)
    result = write_run_files(str(run), ["."], [{"path": "big", "content": big}], diff=True)
    assert "not shown" in result["diff"][-1]["after"]
    assert (run / "big").read_text() == big


@pytest.mark.parametrize(
    ("directories", "files", "field"),
    [
        (["/etc"], [], "directories[0]"),
        (["logs/../../x"], [], "directories[0]"),
        ([], [{"path": "/etc/passwd", "content": "x"}], "files[0].path"),
        ([], [{"path": "ok", "content": "x"}, {"path": "../x", "content": "x"}], "files[1].path"),
        ([], [{"path": "logs/..", "content": "x"}], "files[0].path"),
        ([], [{"path": "", "content": "x"}], "files[0].path"),
        ([], [{"path": "a", "content": 1}], "files[0].content"),
        ([], [{"path": "a", "content": None}], "files[0].content"),
        ([], [{"path": "a", "content": b"x"}], "files[0].content"),
        ([], [{"path": "a", "content": "x", "mode": 420}], "files[0].mode"),
        ([], [{"path": "a", "content": "x", "mode": "0999"}], "files[0].mode"),
        ([], [{"path": "a", "content": "x", "mode": "u=rw"}], "files[0].mode"),
        ([], [{"path": "a", "content": "x", "owner": "root"}], "files[0]"),
        ([], [{"content": "x"}], "files[0].path"),
        ([], ["a"], "files[0]"),
        ([], {"a": "x"}, "files"),
        ("logs", [], "directories"),
        ([3], [], "directories[0]"),
        ([], [{"path": "a", "content": "x"}, {"path": "./a", "content": "y"}], "files[1].path"),
    ],
)
def test_bad_input_is_refused_naming_the_field(run, directories, files, field):
    with pytest.raises(RunFilesError, match=r"^%s " % field.replace("[", r"\[").replace("]", r"\]")):
        write_run_files(str(run), directories, files)
    assert not run.exists()


@pytest.mark.parametrize("dest", ["", None, 3, "  "])
def test_a_missing_dest_is_refused(dest):
    with pytest.raises(RunFilesError, match="^dest "):
        write_run_files(dest, ["."])


def test_a_bad_directory_mode_is_refused(run):
    with pytest.raises(RunFilesError, match="^directory_mode "):
        write_run_files(str(run), ["."], directory_mode=493)


def test_a_file_whose_directory_is_missing_is_refused(run):
    with pytest.raises(RunFilesError, match="list 'logs' in directories"):
        write_run_files(str(run), ["."], [{"path": "logs/a.log", "content": "x"}])
    # In check mode a directory that would be created counts.
    files = [{"path": "logs/a.log", "content": "x"}]
    result = write_run_files(str(run), [".", "logs"], files, check_mode=True)
    assert result["changed"] is True and not run.exists()
    # As in a whole play in check mode: the task that creates the directory wrote nothing either.
    result = write_run_files(str(run), [], [{"path": "logs/a.log", "content": "x"}], check_mode=True)
    assert result["changed"] is True and result["files"] == [str(run / "logs" / "a.log")]
    assert not run.exists()


def test_a_directory_where_a_file_belongs_is_refused(run):
    write_run_files(str(run), [".", "logs"])
    with pytest.raises(RunFilesError, match="not a regular file"):
        write_run_files(str(run), [], [{"path": "logs", "content": "x"}])
    (run / "file").write_text("x")
    with pytest.raises(RunFilesError, match="not a directory"):
        write_run_files(str(run), ["file/sub"])
