import os
import pathlib

import pytest

from ansible_collections.gpuops.training.plugins.module_utils import original_file as of

MARKER = "(gpuops.training.crio_limits)"
SUFFIX = ".gpuops-original"


def test_a_foreign_file_is_saved_once_with_its_mode_then_restored(tmp_path):
    path = tmp_path / "99-ulimits.conf"
    path.write_bytes(b"node's own\n")
    os.chmod(path, 0o600)
    assert of.plan_save(str(path), MARKER, SUFFIX) == of.SAVE
    of.apply(of.SAVE, str(path), SUFFIX)
    kept = tmp_path / ("99-ulimits.conf" + SUFFIX)
    assert kept.read_bytes() == b"node's own\n" and kept.stat().st_mode & 0o777 == 0o600
    assert not (tmp_path / ("99-ulimits.conf" + SUFFIX + ".tmp")).exists()
    path.write_text("# Ansible managed %s\n" % MARKER)
    assert of.plan_save(str(path), MARKER, SUFFIX) == of.NOTHING  # a copy is kept already
    assert of.plan_restore(str(path), MARKER, SUFFIX) == of.RESTORE
    of.apply(of.RESTORE, str(path), SUFFIX)
    assert path.read_bytes() == b"node's own\n" and not kept.exists()
    # The node's own file is back: a second removal leaves it.
    assert of.plan_restore(str(path), MARKER, SUFFIX) == of.NOTHING


def test_the_roles_own_file_is_never_taken_for_the_original_and_is_removed(tmp_path):
    path = tmp_path / "99-ulimits.conf"
    assert of.plan_save(str(path), MARKER, SUFFIX) == of.NOTHING  # nothing there
    path.write_text("# Ansible managed %s\nhand-edited\n" % MARKER)
    assert of.plan_save(str(path), MARKER, SUFFIX) == of.NOTHING
    assert of.plan_restore(str(path), MARKER, SUFFIX) == of.REMOVE
    of.apply(of.REMOVE, str(path), SUFFIX)
    assert not path.exists()
    assert of.plan_restore(str(path), MARKER, SUFFIX) == of.NOTHING


def test_the_marker_counts_only_in_the_header(tmp_path):
    path = tmp_path / "99-ulimits.conf"
    path.write_bytes(b"x" * of.MARKER_WINDOW + MARKER.encode())
    assert of.plan_save(str(path), MARKER, SUFFIX) == of.SAVE


@pytest.mark.parametrize("where", ["path", "copy"])
def test_anything_but_a_regular_file_is_refused_naming_it(tmp_path, where):
    path = tmp_path / "99-ulimits.conf"
    blocker = path if where == "path" else tmp_path / ("99-ulimits.conf" + SUFFIX)
    blocker.mkdir()
    for plan in (
        lambda: of.plan_save(str(path), MARKER, SUFFIX),
        lambda: of.plan_restore(str(path), MARKER, SUFFIX),
    ):
        with pytest.raises(of.OriginalFileError, match="%s is not a regular file" % blocker):
            plan()
    link = tmp_path / "link.conf"
    link.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(of.OriginalFileError, match="link.conf is not a regular file"):
        of.plan_save(str(link), MARKER, SUFFIX)


def test_a_copy_dir_keeps_the_copy_out_of_the_directory_and_goes_when_emptied(tmp_path):
    drop_ins = tmp_path / "crio.conf.d"
    drop_ins.mkdir()
    path = drop_ins / "99-ulimits.conf"
    path.write_bytes(b"node's own\n")
    os.chmod(path, 0o640)
    keep = str(tmp_path / "crio.conf.d.gpuops-originals")
    assert of.copy_path(str(path), SUFFIX, keep) == os.path.join(keep, "99-ulimits.conf" + SUFFIX)
    assert of.plan_save(str(path), MARKER, SUFFIX, keep) == of.SAVE
    of.apply(of.SAVE, str(path), SUFFIX, keep)
    assert os.stat(keep).st_mode & 0o777 == 0o700
    kept = pathlib.Path(keep) / ("99-ulimits.conf" + SUFFIX)
    assert (kept.read_bytes(), kept.stat().st_mode & 0o777) == (b"node's own\n", 0o640)
    assert sorted(entry.name for entry in drop_ins.iterdir()) == ["99-ulimits.conf"]
    path.write_text("# %s\n" % MARKER)
    assert of.plan_save(str(path), MARKER, SUFFIX, keep) == of.NOTHING
    assert of.plan_restore(str(path), MARKER, SUFFIX, keep) == of.RESTORE
    of.apply(of.RESTORE, str(path), SUFFIX, keep)
    assert (path.read_bytes(), path.stat().st_mode & 0o777) == (b"node's own\n", 0o640)
    assert not os.path.exists(keep)
    assert sorted(entry.name for entry in drop_ins.iterdir()) == ["99-ulimits.conf"]
