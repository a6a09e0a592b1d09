"""benchmarks/common.write_results: a section keeps the machine and the date it was measured
on, and auto.py --merge refuses to put rows of two machines in one table."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "benchmarks"))

import auto  # noqa: E402
import common  # noqa: E402

ROW = ["GEMM 1024 (GFLOP/s)", "1", "90.0", "", "88.0", "", "", "1.02", "", "0.01"]


def _section(text, name):
    return text.split(f"<!-- section:{name} -->\n")[1].split(f"\n<!-- /section:{name} -->")[0]


def test_a_section_names_its_machine_once(tmp_path):
    path = tmp_path / "RESULTS.md"
    common.write_results("a", "## A\n\n| x |\n|---|\n| 1 |", path)
    common.write_results("b", "## B\n\nbody", path)
    common.write_results("a", "## A\n\n| x |\n|---|\n| 2 |", path)     # replaced, b kept
    text = path.read_text()
    a, b = _section(text, "a"), _section(text, "b")
    machine = common.machine_description()
    assert "| 2 |" in a and "| 1 |" not in a and b.startswith("## B\n\nbody")
    assert a.endswith(f": {machine}.") and a.count(machine) == 1
    assert a.split("\n\n")[-1].startswith("Measured on ")
    # a body that names the machine itself gets no second line
    common.write_results("c", f"## C\n\nMachine: {machine}; load 1.0", path)
    assert _section(path.read_text(), "c") == f"## C\n\nMachine: {machine}; load 1.0"


def _auto_section(path, monkeypatch, machine):
    monkeypatch.setattr(common, "RESULTS", path)
    table = common.markdown_table(["case"] + [""] * 9, [ROW])
    path.write_text("# r\n\n<!-- section:auto -->\n## Auto-scheduling (no search)\n\n" + table +
                    "\n\nThe note.\n\nMeasured on 2026-01-01: " + machine +
                    ".\n<!-- /section:auto -->\n")


def test_merge_keeps_the_machine_line_last(tmp_path, monkeypatch):
    _auto_section(tmp_path / "R.md", monkeypatch, common.machine_description())
    title, table, note = auto._merge_rows([ROW[:2] + ["91.0"] + ROW[3:]], ["gemm1024"], False)
    assert "91.0" in table and "90.0" not in table
    assert note.startswith("The note. Re-measured alone")
    assert note.endswith(f"\n\nMeasured on 2026-01-01: {common.machine_description()}.")


def test_merge_refuses_a_table_of_another_machine(tmp_path, monkeypatch):
    _auto_section(tmp_path / "R.md", monkeypatch, "Some Other CPU, 64 cores available")
    why = auto._merge_rows([ROW], ["gemm1024"], False)
    assert isinstance(why, str) and "measured on Some Other CPU, 64 cores available" in why
    assert "run every case" in why
