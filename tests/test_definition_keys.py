"""Caches of what a workload's definition produces are keyed by that definition's source: the ONNX
export (backends/onnxruntime/program.py: cache_key, with the exported torch implementation) and
the float64 parity reference (runner/reference.py: key). A model fix must not meet a stale entry
(issue 18: a stale ddpm export had to be deleted by hand)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from dlbench import workloads
from dlbench.runner import reference
from dlbench.runner.plan import workload_spec
from dlbench.workloads import ddpm


def _edited_copy(source: Path, target: Path) -> Path:
    """`source` copied to `target` with one changed line (a constant of the definition)."""
    text = source.read_text()
    assert "BETA_END = 0.02" in text or source.name != "ddpm.py"
    target.write_text(text.replace("BETA_END = 0.02", "BETA_END = 0.021") + "\n# edited\n")
    return target


def test_a_changed_workload_definition_changes_its_digest_and_the_reference_key(tmp_path, monkeypatch):
    spec = workload_spec("ddpm", "tiny")
    digest, ref_key = workloads.definition_digest("ddpm"), reference.key(spec, 3)
    assert workloads.definition_digest("ddpm") == digest  # a function of the source
    assert workloads.definition_digest("cnn") != digest
    monkeypatch.setattr(ddpm, "__file__", str(_edited_copy(Path(ddpm.__file__), tmp_path / "ddpm.py")))
    assert workloads.definition_digest("ddpm") != digest
    assert reference.key(spec, 3) != ref_key


def test_the_onnx_export_key_follows_the_definition_and_the_exported_torch_code(tmp_path, monkeypatch):
    pytest.importorskip("onnxruntime")
    from dlbench.backends.onnxruntime import program

    spec = workload_spec("ddpm", "tiny")
    params = ddpm.init_params(spec)
    key = program.cache_key(spec, params)
    assert program.cache_key(spec, params) == key
    assert program.cache_key(workload_spec("ddpm", "tiny", batch_size=8), params) == key  # dynamic batch axis
    # The workload's definition.
    with monkeypatch.context() as m:
        m.setattr(ddpm, "__file__", str(_edited_copy(Path(ddpm.__file__), tmp_path / "ddpm.py")))
        assert program.cache_key(spec, params) != key
    assert program.cache_key(spec, params) == key
    # The torch model that is exported: a copy of the torch backend package with its ddpm module edited.
    original = program._origin(program.TORCH_PACKAGE)
    torch_copy = tmp_path / "torch"
    shutil.copytree(Path(original).parent, torch_copy, ignore=shutil.ignore_patterns("__pycache__"))
    with monkeypatch.context() as m:
        m.setattr(program, "_origin", lambda module: str(
            torch_copy / ("__init__.py" if module == program.TORCH_PACKAGE else module.rsplit(".", 1)[1] + ".py")))
        assert program.cache_key(spec, params) == key  # the same files: the same key
        (torch_copy / "ddpm.py").write_text((torch_copy / "ddpm.py").read_text() + "\n# a model fix\n")
        assert program.cache_key(spec, params) != key


def test_a_workload_built_from_another_changes_with_it(tmp_path, monkeypatch):
    """vit takes its encoder blocks from transformer.py and its images from cnn.py: both are part
    of its definition (an edited copy of transformer.py changes vit's digest, not cnn's)."""
    from dlbench.workloads import transformer

    vit, cnn = workloads.definition_digest("vit"), workloads.definition_digest("cnn")
    edited = tmp_path / "transformer.py"
    edited.write_text(Path(transformer.__file__).read_text() + "\n# edited\n")
    monkeypatch.setattr(transformer, "__file__", str(edited))
    assert workloads.definition_digest("vit") != vit
    assert workloads.definition_digest("cnn") == cnn
