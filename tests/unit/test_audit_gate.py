"""The scanner's gate: each fingerprint item is looked for exactly where a unit holds all of its
words, and matching what passed gives what matching every item would."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from taskforge.guest.scanner import scan


def _fingerprint(**items: Any) -> dict[str, Any]:
    return {"n": 12, "ngrams": [], "anchors": [], "names": [], "signatures": [], "constants": [], "docstrings": [],
            "test_ids": [], "bodies": {}, **items}


def _evidence(root: Path, fingerprint: dict[str, Any]) -> dict[str, list[str]]:
    reply = scan({"fingerprints": {"task": fingerprint}, "roots": [str(root)]})
    return {Path(f["path"]).name: sorted(e["value"] for e in f["evidence"]) for f in reply["findings"]["task"]}


def test_dotted_names_match_as_one_alternation_would(tmp_path: Path) -> None:
    """Where a module and a function in it both match, the longer name takes the match (as in one
    alternation of all items, longest first); the module alone counts where it stands alone."""
    (tmp_path / "uses_function.txt").write_text("see shapely_kit.geometry_ops.buffer_polygon for details\n")
    (tmp_path / "uses_both.txt").write_text("shapely_kit.geometry_ops.buffer_polygon and shapely_kit.geometry_ops\n")
    (tmp_path / "module_path.txt").write_text("shapely_kit.geometry_ops, copied from shapely_kit/geometry_ops.py\n")
    (tmp_path / "words_only.txt").write_text("shapely_kit has geometry_ops and buffer_polygon, apart\n")
    fingerprint = _fingerprint(names=["shapely_kit.geometry_ops", "shapely_kit.geometry_ops.buffer_polygon"])
    found = _evidence(tmp_path, fingerprint)
    assert found["uses_function.txt"] == ["shapely_kit.geometry_ops.buffer_polygon"]
    assert found["uses_both.txt"] == ["shapely_kit.geometry_ops", "shapely_kit.geometry_ops.buffer_polygon"]
    assert found["module_path.txt"] == ["shapely_kit.geometry_ops", "shapely_kit/geometry_ops.py"]
    assert "words_only.txt" not in found, "all the words, but not the name: no evidence"


def test_constants_docstrings_and_test_ids_need_every_word(tmp_path: Path) -> None:
    constant = "refusing to merge overlapping tile grids"
    docstring = "Merge the tile grids of two rasters into one mosaic, resampling where they overlap."
    test_id = "tests/test_mosaic.py::test_merge_rejects_overlapping_grids"
    (tmp_path / "constant.txt").write_text(f"raise ValueError('{constant}')\n")
    (tmp_path / "docstring.txt").write_text("    " + docstring.replace(" two ", "\n    two ") + "\n")
    (tmp_path / "cache.json").write_text('{"tests/test_mosaic.py::test_merge_rejects_overlapping_grids": true}\n')
    (tmp_path / "scattered.txt").write_text(" ".join(reversed(f"{constant} {docstring}".split())) + "\n")
    fingerprint = _fingerprint(constants=[constant], docstrings=[docstring], test_ids=[test_id])
    found = _evidence(tmp_path, fingerprint)
    assert found["constant.txt"] == [constant]
    assert found["docstring.txt"] == [docstring[:77] + "..."]  # values are shortened to 80 characters
    assert found["cache.json"] == [test_id]
    assert "scattered.txt" not in found, "every word, in another order: neither the constant nor the docstring"


def test_every_copy_of_a_text_is_reported_where_it_lies(tmp_path: Path) -> None:
    """The scanner works out what a text holds once, and reports each copy: on disk, in another
    folder, and inside a zip archive."""
    import zipfile

    constant = "refusing to merge overlapping tile grids"
    text = f"raise ValueError('{constant}')\n"
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "copy.py").write_text(text)
    (tmp_path / "b" / "copy.py").write_text(text)
    with zipfile.ZipFile(tmp_path / "b" / "wheel.whl", "w") as archive:
        archive.writestr("pkg/copy.py", text)
    reply = scan({"fingerprints": {"task": _fingerprint(constants=[constant])}, "roots": [str(tmp_path)]})
    paths = sorted(f["path"].removeprefix(str(tmp_path)) for f in reply["findings"]["task"])
    assert paths == ["/a/copy.py", "/b/copy.py", "/b/wheel.whl!/pkg/copy.py"]
