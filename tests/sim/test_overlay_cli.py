"""`tidings sim pastry`, `sim delivery`, `sim scribe` and `sim routing`: reports, progress kept off stdout,
bad input refused with exit 2."""

from __future__ import annotations

import json

from tidings.cli.main import main


def test_the_pastry_command_reports_every_phase_as_json(capsys):
    assert main(["sim", "pastry", "--nodes", "500", "--lookups", "500", "--fail", "50", "--settle", "4",
                 "--json"]) == 0
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert list(report["phases"]) == ["before", "right_after", "after_repair"]
    assert all(phase["wrong"] == phase["lost"] == 0 for phase in report["phases"].values())
    assert sum(report["phases"]["before"]["hops_percent"].values()) > 99.9
    assert report["leaf_sets_wrong_after_repair"] == 0
    assert "before: 500/500" in err


def test_the_pastry_command_prints_a_table_beside_the_paper(capsys):
    assert main(["sim", "pastry", "--nodes", "500", "--lookups", "300", "--model", "sphere", "--quiet"]) == 0
    out, err = capsys.readouterr()
    assert "before        mean" in out and "paper (N=100,000): mean 3.98" in out
    assert err == ""


def test_bad_arguments_exit_2_with_one_line(capsys, tmp_path):
    bad = tmp_path / "m.txt"
    bad.write_text("0 1\n1 0 3\n")
    for argv in (["--nodes", "1"], ["--nodes", "10", "--fail", "9"], ["--nodes", "2", "--model", f"matrix:{bad}"],
                 ["--nodes", "10", "--model", "torus"]):
        assert main(["sim", "pastry", "--quiet", *argv]) == 2
        assert capsys.readouterr().err.startswith("tidings: error: ")


def test_the_delivery_command_runs_seeds_and_counts_them(capsys):
    assert main(["sim", "delivery", "--seed", "2", "--seeds", "2", "--brokers", "8"]) == 0
    out = capsys.readouterr().out
    assert "seed 2: ok" in out and "seed 3: ok" in out
    assert out.rstrip().splitlines()[-1].startswith("2 passed, 0 failed")
    assert main(["sim", "delivery", "--seeds", "0"]) == 2
    assert main(["sim", "delivery", "--seeds", "3..2"]) == 2


def test_the_churn_sweep_takes_a_range_of_seeds_and_reports_each_ones_cost(capsys):
    assert main(["sim", "delivery", "--churn", "--brokers", "40", "--seeds", "5..6"]) == 0
    out = capsys.readouterr().out.rstrip().splitlines()
    assert [line.split(":")[0] for line in out[:2]] == ["seed 5", "seed 6"]
    assert all(" s CPU, " in line and " MiB)" in line for line in out[:2])
    assert out[-1].startswith("2 passed, 0 failed") and "peak memory max" in out[-1]


def test_the_scribe_command_prints_one_summary_line_and_writes_the_distributions(capsys, tmp_path):
    out_file = tmp_path / "scribe.json"
    assert main(["sim", "scribe", "--nodes", "200", "--groups", "20", "--quiet", "--out", str(out_file)]) == 0
    out, err = capsys.readouterr()
    assert err == "" and out.count("\n") == 1
    summary = json.loads(out)
    assert summary["members_missed"] == summary["duplicates"] == 0
    assert summary["topology"]["routers"] == 5050 and summary["rad"]["median"] >= 1.0
    saved = json.loads(out_file.read_text())
    assert len(saved["distributions"]["rad"]) <= 20 and saved["summary"]["nodes"] == 200
    assert main(["sim", "scribe", "--nodes", "1", "--quiet"]) == 2
    assert capsys.readouterr().err.startswith("tidings: error: ")


def test_the_routing_command_prints_the_strategies_side_by_side(capsys):
    assert main(["sim", "routing", "--brokers", "60", "--channels", "10", "--churn", "3"]) == 0
    out = capsys.readouterr().out
    header = out.splitlines()[1]
    assert all(name in header for name in ("broadcast", "spanning-tree", "tree-per-channel", "scribe"))
    assert "messages/event" in out and "reached after repair" in out
    assert main(["sim", "routing", "--brokers", "10", "--churn", "5"]) == 2
