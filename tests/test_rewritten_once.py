"""The controller rewrites the test modules' asserts once; the workers read them (see
rewritten_once.py). These import a module through pytest's own import hook, as a worker does."""

import importlib.util
import sys
from pathlib import Path

import pytest
import rewritten_once
from _pytest.assertion import rewrite

MODULE = """
def compare():
    assert [1, 2] == [1, 3]

def version():
    return 1
"""


def imported(config: pytest.Config, source: Path):
    """The module at source, imported through pytest's assert-rewriting hook."""
    hook = config.stash[rewrite.assertstate_key].hook
    spec = hook.find_spec(source.stem, [str(source.parent)])
    assert spec is not None and spec.loader is hook, "pytest's hook does not take the module"
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def worker(monkeypatch, tmp_path, pytestconfig):
    """A test module and a folder: after rewrite_into and read_from, a worker's import."""
    if pytestconfig.option.assertmode != "rewrite":
        pytest.skip("pytest runs with --assert=plain: it rewrites nothing")
    monkeypatch.setattr(rewrite, "get_cache_dir", rewrite.get_cache_dir)  # put back after
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # as PYTHONDONTWRITEBYTECODE=1
    source = tmp_path / "tests" / "test_rewritten_module.py"
    source.parent.mkdir()
    source.write_text(MODULE)
    return source, tmp_path / "rewritten"


def test_a_worker_imports_what_the_controller_rewrote_without_rewriting_it(
    worker, monkeypatch, pytestconfig
):
    source, folder = worker
    rewritten_once.rewrite_into(folder, pytestconfig, [source])
    rewritten_once.read_from(folder)

    def rewrite_again(*args):
        raise AssertionError("the worker rewrote the module itself")

    monkeypatch.setattr(rewrite, "_rewrite_test", rewrite_again)
    module = imported(pytestconfig, source)
    with pytest.raises(AssertionError) as failed:
        module.compare()
    assert "At index 1 diff: 2 != 3" in str(failed.value)  # pytest's explanation: rewritten
    assert not list(source.parent.glob("**/*.pyc")), "bytecode was written beside the source"


def test_a_module_changed_since_is_rewritten_from_its_new_source(worker, pytestconfig):
    source, folder = worker
    rewritten_once.rewrite_into(folder, pytestconfig, [source])
    rewritten_once.read_from(folder)
    source.write_text(MODULE.replace("return 1", "return 2"))
    assert imported(pytestconfig, source).version() == 2


def test_a_module_that_cannot_be_rewritten_is_left_to_the_worker(worker, pytestconfig):
    source, folder = worker
    broken = source.with_name("test_broken.py")
    broken.write_text("def test(:\n")
    rewritten_once.rewrite_into(folder, pytestconfig, [broken, source])  # no error here
    written = {pyc.name.split(".")[0] for pyc in folder.glob("**/*.pyc")}
    assert written == {"test_rewritten_module"}
    rewritten_once.read_from(folder)
    with pytest.raises(SyntaxError):  # where the worker imports it, as pytest reports it
        imported(pytestconfig, broken)


def test_this_worker_reads_its_test_modules_from_the_controllers_folder(pytestconfig):
    if not hasattr(pytestconfig, "workerinput"):
        pytest.skip("no pytest-xdist workers (-n 0): nothing is rewritten ahead")
    if pytestconfig.option.assertmode != "rewrite":
        pytest.skip("pytest runs with --assert=plain: it rewrites nothing")
    folder = Path(pytestconfig.workerinput["rewritten"])
    this = Path(__file__)  # as pytest imported it
    assert rewrite.get_cache_dir(this).is_relative_to(folder)
    pyc = rewrite.get_cache_dir(this) / (this.name[:-3] + rewrite.PYC_TAIL)
    assert rewrite._read_pyc(this, pyc) is not None, "the controller did not rewrite this file"
