"""The soak and side-by-side benchmarks run end to end on tiny sizes, and their arithmetic holds.

They are instruments for issue 19's work on the broker: a script that broke quietly
would report nonsense figures, so each run here checks every message was receipted and
consumed, not only that the script exited 0.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import broker_soak  # noqa: E402
import console_bench  # noqa: E402
import peers  # noqa: E402


def run_script(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(BENCHMARKS / name), *args], capture_output=True, text=True,
                          timeout=240, check=False, cwd=BENCHMARKS, env={**os.environ})


def test_soak_reports_every_round_and_a_summary():
    done = run_script("broker_soak.py", "--rounds", "2", "--unbatched", "2000", "--batched", "10000",
                      "-c", "managedLedgerCacheSizeMB=8")
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    start, rounds, summary = lines[0], lines[1:-1], lines[-1]
    assert start["config"] == ["managedLedgerCacheSizeMB=8"]
    assert [r["round"] for r in rounds] == [1, 2]
    for line in rounds:
        for kind in ("unbatched", "batched"):
            assert line[kind]["failed"] == 0
            assert line[kind]["msg_s"] > 0
        assert line["broker_rss_mb"] > start["idle_rss_mb"] / 2
        assert line["broker_open_fds"] > 0
    assert summary["summary"] and summary["broker_alive_at_end"] and summary["failed"] == 0
    assert summary["rss_mb_last"] == rounds[-1]["broker_rss_mb"]


def test_soak_refuses_empty_rounds():
    done = run_script("broker_soak.py", "--unbatched", "0", "--batched", "0")
    assert done.returncode == 2
    assert "--unbatched/--batched" in done.stderr


def test_soak_names_the_config_key_the_broker_refused():
    done = run_script("broker_soak.py", "-c", "noSuchKey=1", "--rounds", "1", "--unbatched", "10", "--batched", "0")
    assert done.returncode == 1
    assert "did not start" in done.stderr and "noSuchKey" in done.stderr
    assert "Traceback" not in done.stderr


def test_soak_summary_compares_last_round_with_first():
    def line(round_no: int, cpu: float, rss: float) -> dict:
        return {"round": round_no, "unbatched": {"broker_cpu_s_per_M": cpu, "failed": 0}, "broker_rss_mb": rss}

    flat = broker_soak.summary([line(1, 20.0, 80.0), line(2, 30.0, 90.0), line(3, 21.9, 100.0)], [])
    assert flat["unbatched"]["last_over_first"] == 1.09
    assert flat["unbatched"]["within_10pct"] is True
    assert flat["unbatched"]["cpu_s_per_M_max"] == 30.0
    assert flat["rss_growth_mb"] == 20.0
    grown = broker_soak.summary([line(1, 20.0, 80.0), line(2, 22.5, 80.0)], [])
    assert grown["unbatched"]["within_10pct"] is False
    assert "batched" not in grown


def test_ratios_are_magnetar_over_peer():
    table = {"produce_unbatched": {
        "magnetar": {"broker_cpu_s_per_M": 18.0, "client_cpu_s_per_M": 20.0, "msg_s": 40_000},
        "redis-always": {"broker_cpu_s_per_M": 3.0, "client_cpu_s_per_M": 7.0, "msg_s": 200_000}}}
    assert peers.ratios(table) == {"produce_unbatched": {
        "redis-always": {"magnetar_broker_cpu_s_per_M_over_peer": 6.0, "magnetar_msg_s_over_peer": 0.2}}}


def _peers_run(tmp_path: Path, *only: str) -> dict:
    png = tmp_path / "peers.png"
    args = ["--messages", "2000", "--runs", "1", "--plot", str(png)]
    for name in only:
        args += ["--only", name]
    done = run_script("peers.py", *args)
    assert done.returncode == 0, done.stderr
    assert png.stat().st_size > 10_000
    return json.loads(done.stdout)


def test_peers_measures_magnetar_on_all_four_workloads(tmp_path):
    result = _peers_run(tmp_path, "magnetar")
    assert set(result["table"]) == set(peers.WORKLOADS)
    (run,) = result["all_runs"]["magnetar"]
    assert {workload: m["messages"] for workload, m in run.items()} == dict.fromkeys(peers.WORKLOADS, 2000)
    assert result["table"]["produce_unbatched"]["magnetar"]["broker_cpu_s_per_M"] > 0


@pytest.mark.skipif(shutil.which("redis-server") is None or shutil.which("nats-server") is None
                    or importlib.util.find_spec("redis") is None or importlib.util.find_spec("nats") is None,
                    reason="the peers are optional: apt-get install redis-server nats-server; pip install '.[bench]'")
def test_peers_drive_redis_and_nats_through_every_message(tmp_path):
    result = _peers_run(tmp_path, "redis-always", "nats-jetstream")
    assert set(result["all_runs"]) == {"magnetar", "redis-always", "nats-jetstream"}
    for name, (run,) in result["all_runs"].items():
        assert {workload: m["messages"] for workload, m in run.items()} == dict.fromkeys(peers.WORKLOADS, 2000), name
    assert set(result["ratios"]["consume_ack_each"]) == {"redis-always", "nats-jetstream"}


def test_unbatched_publish_bench_runs_both_modes_every_round_and_checks_what_was_stored():
    done = run_script("unbatched_publish_bench.py", "--messages", "2000", "--rounds", "2")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert set(result["rounds"]) == {"callback", "none"}
    for mode, rounds in result["rounds"].items():
        assert len(rounds) == 2, mode
        assert all(r["msg_s"] > 0 and r["broker_cpu_s_per_M"] > 0 for r in rounds), mode
    none_rates = [r["msg_s"] for r in result["rounds"]["none"]]
    assert result["median"]["none"]["msg_s"] == round(statistics.median(none_rates), 2)


def test_unbatched_publish_bench_names_the_flag_it_refuses():
    done = run_script("unbatched_publish_bench.py", "--messages", "0")
    assert done.returncode == 2
    assert "--messages" in done.stderr and "Traceback" not in done.stderr


def test_publish_path_bench_receipts_every_send_and_splits_an_unbatched_send_by_step():
    done = run_script("publish_path_bench.py", "--messages", "2000")
    assert done.returncode == 0, done.stderr  # it returns only once every SEND has its receipt
    result = json.loads(done.stdout)
    for workload in ("unbatched", "batched_100"):
        assert result[workload]["cpu_s_per_million"] > 0 and result[workload]["msg_per_s"] > 0, workload
    stages = result["unbatched_stages_ns"]
    assert set(stages) == {"frames_decoded", "send_checked", "receipt_encoded", "upb_command_parse",
                           "upb_metadata_parse", "upb_metadata_parse_and_required_check"}
    assert all(ns > 0 for ns in stages.values()), stages


def test_testing_bench_times_every_kind_of_broker():
    done = run_script("testing_bench.py", "--runs", "2")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["in_process_cold"]["ready_s"]["median"] > 0
    for kind in ("in_process", "subprocess", "suite_harness"):
        figures = result[kind]
        assert 0 < figures["ready_s"]["median"] <= figures["first_message_s"]["median"], kind
        assert figures["ready_s"]["max"] >= figures["ready_s"]["median"] and figures["close_s"]["median"] > 0, kind


def test_testing_bench_names_the_flag_it_refuses():
    done = run_script("testing_bench.py", "--runs", "0")
    assert done.returncode == 2
    assert "--runs" in done.stderr and "Traceback" not in done.stderr


def test_startup_bench_compares_installs_run_by_run():
    done = run_script("startup_bench.py", "--python", sys.executable, "--python", sys.executable, "--runs", "2")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert [install["python"] for install in result["installs"]] == [sys.executable, sys.executable]
    for install in result["installs"]:
        assert install["startup_cpu_s"]["median"] > 0 and 0 < install["startup_s"]["min"] <= install["startup_s"]["max"]
        assert 0 < install["binary_ready_s"]["min"] <= install["startup_s"]["min"]  # the binary port serves first
        assert install["idle_rss_mb"]["median"] > 10
    ratios = result["ratios_to_first"][0]
    assert set(ratios) == {"python", "binary_ready_s", "startup_s", "startup_cpu_s", "idle_rss_mb"}
    assert 0.5 < ratios["idle_rss_mb"]["median"] < 2  # the same install against itself


def test_startup_bench_names_the_flag_it_refuses():
    done = run_script("startup_bench.py", "--runs", "0")
    assert done.returncode == 2
    assert "--runs" in done.stderr and "Traceback" not in done.stderr


def test_admin_http_bench_reports_each_phase_per_install():
    done = run_script("admin_http_bench.py", "--requests", "40", "--rounds", "1")
    assert done.returncode == 0, done.stderr
    (install,) = json.loads(done.stdout)["installs"]
    assert install["python"] == sys.executable
    for phase in ("keepalive_get", "new_connection_get", "policy_post"):
        assert install[phase]["requests_per_s"] > 0 and install[phase]["broker_cpu_us_per_request"] >= 0, phase


def test_admin_http_bench_names_the_flag_it_refuses():
    done = run_script("admin_http_bench.py", "--requests", "2")
    assert done.returncode == 2
    assert "--requests" in done.stderr and "Traceback" not in done.stderr


def test_replication_bench_replicates_every_message_and_reports_both_lags():
    done = run_script("replication_bench.py", "--rates", "300", "--seconds", "1", "--rounds", "1")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    (only,) = report["rounds"]
    assert only["messages"] == only["west_received"] == only["east_received"] == 300
    summary = report["summary"]["300"]
    assert summary["all_replicated"] and summary["west_lag_p50_ms"] > 0 and summary["east_lag_p50_ms"] > 0
def test_replicated_subscription_bench_reports_what_a_failover_delivers_again():
    done = run_script("replicated_subscription_bench.py", "--rate", "200", "--seconds", "2", "--rounds", "1",
                      "--frequencies", "200")
    assert done.returncode == 0, done.stderr
    (only,) = json.loads(done.stdout)["rounds"]["200"]
    assert only["acked"] > 0 and only["first_on_west"] is not None
    assert 0 <= only["redelivered"] <= only["acked"]  # never before what west last heard of
    assert only["markers_per_s_east"] > 0


def test_console_bench_times_every_view_and_the_open_console():
    done = run_script("console_bench.py", "--topics", "20", "--rounds", "1", "--idle-seconds", "1")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["topics"] == 21
    assert set(result["view_s"]) == {*console_bench.VIEWS, "namespace_search"}
    assert {"overview", "namespace_first_row", "topic", "messages", "functions"} <= set(console_bench.VIEWS)
    assert all(len(view["all"]) == 1 and view["median"] > 0 for view in result["view_s"].values())
    cpu = result["broker_cpu_percent"]
    assert cpu["console_cost"] == round(cpu["overview_open"] - cpu["idle"], 2)
def test_latency_bench_times_every_message_of_every_cell_from_its_schedule():
    done = run_script("latency_bench.py", "--duration", "0.4", "--warmup", "0.1", "--rate", "500")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    cells = result["cells"]
    magnetar = [c for c in cells if c["broker"] == "magnetar"]
    assert {(c["client"], c["batching"], c["callback_every"]) for c in magnetar} == {
        (client, batching, every) for client in ("official", "magnetar") for batching in (False, True)
        for every in (1, 10)}
    peers_expected = {"redis-always", "nats-jetstream"} - set(result["skipped"])
    assert {c["broker"] for c in cells} == {"magnetar", *peers_expected}
    for cell in cells:
        sent, timed_from = cell["messages_sent"], 50  # 0.1 s of 500 msg/s is warm-up, not timed
        every = cell["callback_every"] or 1
        assert cell["publish_failed"] == 0, cell
        assert cell["publish_ms"]["count"] == sum(1 for i in range(timed_from, sent) if i % every == 0), cell
        assert cell["e2e_ms"]["count"] == sent - timed_from, cell  # the consumer process got every message
        figures = cell["e2e_ms"]
        assert 0 < figures["p50"] <= figures["p99"] <= figures["p99.9"] <= figures["max"], cell
    assert set(result["table"]) == {c["cell"] for c in cells}


def test_latency_bench_stages_come_from_inside_the_broker_of_each_cell():
    done = run_script("latency_bench.py", "--duration", "0.4", "--warmup", "0.1", "--rate", "500", "--no-peers",
                      "--client", "official", "--batching", "off", "--callback", "tenth", "--stages")
    assert done.returncode == 0, done.stderr
    (cell,) = json.loads(done.stdout)["cells"]
    stages = cell["broker_stages_ms"]
    assert stages["publish"]["count"] >= 1 and stages["hop"]["count"] >= stages["publish"]["count"], stages
    assert stages["commit_group"]["count"] >= stages["queue_wait"]["count"] >= 1, stages
    assert stages["loop_iteration"]["count"] > stages["drain"]["count"] >= 1, stages
    assert stages["cpu_us_per_message"] > 0, stages
    assert 0 <= stages["publish"]["p50"] <= stages["publish"]["max"], stages
    # a synced ledger's data file is O_DSYNC: its write is the sync, one a group (bar the 1st)
    assert stages["data_write"]["count"] >= stages["commit_group"]["count"] - 1, stages
    assert "count" not in stages["fdatasync"], stages
    assert cell["disk_write_fdatasync_ms"]["count"] == 300, cell
    went = cell["where_the_time_went_ms"]
    assert went["joined"] == cell["publish_ms"]["count"], went  # every timed message found in the broker
    assert went["at_or_over_p99"]["count"] >= 1, went
    for segment, figures in went["all"].items():
        low = -0.2 if segment == "sender_late" else 0  # a send may leave up to 0.1 ms before its slot
        assert figures["mean"] >= low, (segment, went)
    assert went["all"]["write_fsync"]["mean"] > 0 and went["all"]["storage_queue"]["mean"] > 0, went


def test_commit_stall_bench_runs_each_tree_every_round_in_alternating_order():
    src = str(BENCHMARKS.parent / "src")
    done = run_script("commit_stall_bench.py", "--rate", "2000", "--seconds", "0.5", "--rounds", "2",
                      "--tree", f"one={src}", "--tree", f"two={src}")
    assert done.returncode == 0, done.stderr
    runs = json.loads(done.stdout)["runs"]
    assert [(run["tree"], run["round"]) for run in runs] == [("one", 1), ("two", 1), ("two", 2), ("one", 2)]
    for run in runs:
        assert run["count"] == 1000, run  # every append became durable
        assert 0 < run["p50"] <= run["p99"] <= run["p99.9"] <= run["max"], run
        assert 1 <= run["commits"] <= 1000 and run["entries_per_commit"] == round(1000 / run["commits"], 1), run
        assert run["cpu_us_per_entry"] > 0, run


def test_latency_bench_names_the_flag_it_refuses():
    done = run_script("latency_bench.py", "--rate", "0")
    assert done.returncode == 2
    assert "--rate" in done.stderr and "Traceback" not in done.stderr
    done = run_script("latency_bench.py", "--magnetar", "nolabel")
    assert done.returncode == 2
    assert "LABEL=SRC" in done.stderr and "Traceback" not in done.stderr


def test_kafka_latency_bench_counts_every_record_of_each_cell():
    done = run_script("kafka_latency_bench.py", "--rates", "200,400", "--seconds", "1")
    assert done.returncode == 0, done.stderr
    cells = json.loads(done.stdout)["cells"]
    assert sorted(cells) == ["magnetar 200/s round 1", "magnetar 400/s round 1"]
    for name, figures in cells.items():
        rate = int(name.split()[1].removesuffix("/s"))
        assert figures["errors"] == 0 and figures["records"] == rate  # one measured second, warm-up left out
        assert 0 < figures["p50"] <= figures["p99"] <= figures["p99.9"] <= figures["max"]
        # the broker's own view of the cell: its produce answers' mean time, its loop probes
        assert figures["broker_publish_mean_ms"] > 0
        assert figures["broker_loop_probes"] >= 10 and 0 <= figures["broker_loop_lag_over_5ms"] <= figures[
            "broker_loop_probes"]
        assert figures["broker_young_collections"] >= 0 and figures["broker_young_collections_freed"] >= 0


def test_metrics_bench_scrapes_every_topic_beside_a_probe():
    done = run_script("metrics_bench.py", "--topics", "20", "--rounds", "2")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    (rounds,) = result["rounds"].values()
    assert len(rounds) == 2
    for scrape in rounds:
        assert scrape["bytes"] > 20 * 1000  # every topic's samples, not an empty page
        assert scrape["probe_answers"] >= 0 and scrape["seconds"] > 0
    (stop,) = result["stop_seconds"].values()
    assert stop >= 0  # tenths of a second: a broker of 20 topics may stop in less than one


def test_kafka_produce_path_bench_answers_every_request_in_both_formats():
    done = run_script("kafka_produce_path_bench.py", "--requests", "300")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    for fmt in ("pulsar", "kafka"):
        figures = result[f"entryFormat={fmt}"]
        assert figures["cpu_s_per_million"] > 0 and figures["requests_per_s"] > 0


def test_transactions_bench_runs_each_tree_in_turns_and_commits_every_transaction():
    src = str(BENCHMARKS.parent / "src")
    done = run_script("transactions_bench.py", "--messages", "800", "--rounds", "2", "--in-flight", "2",
                      "--magnetar", f"a={src}", "--magnetar", f"b={src}")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    for label in ("a", "b"):
        figures = result[label]
        assert figures["commits"] == {"transactional_1_in_flight": 16, "transactional_2_in_flight": 16}
        assert all(len(rates) == 2 and min(rates) > 0 for rates in figures["msg_per_s"].values())
        assert set(figures["cpu_us_per_msg"]) == set(figures["msg_per_s"])
        assert all(cpu["client"] > 0 for cpu in figures["cpu_us_per_msg"].values())
        assert 0 < figures["commit_ms"]["transactional_1_in_flight"]["p50"] <= \
            figures["commit_ms"]["transactional_1_in_flight"]["p99"]


def test_transactions_bench_names_the_flag_it_refuses():
    done = run_script("transactions_bench.py", "--magnetar", "nolabel")
    assert done.returncode == 2
    assert "--magnetar" in done.stderr and "Traceback" not in done.stderr


def test_client_cost_bench_measures_every_client_per_message():
    """Each workload for the official client, this tree's magnetar.client and a baseline tree's
    (this one again): CPU per message of a run that had every message answered."""
    src = Path(__file__).resolve().parents[2] / "src"
    done = run_script("client_cost_bench.py", "--rate", "500", "--seconds", "0.4", "--rounds", "1",
                      "--workloads", "send_unbatched_at_rate,send_batched_at_rate,receive_ack_at_rate",
                      "--baseline", str(src))
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    for workload in ("send_unbatched_at_rate", "send_batched_at_rate", "receive_ack_at_rate"):
        row = result[workload]
        for client in ("official", "magnetar", "magnetar_baseline"):
            assert row[client]["cpu_us_per_msg"] > 0 and row[client]["msg_per_s"] > 0, (workload, client)
            if workload.startswith("send_"):  # the batched workload's ids are batch members, the other's not
                assert row[client]["batched_share"] == (1 if workload == "send_batched_at_rate" else 0), row
        assert row["ratio_cpu_magnetar_over_official"] == round(
            row["magnetar"]["cpu_us_per_msg"] / row["official"]["cpu_us_per_msg"], 2)


def test_client_cost_bench_names_the_flag_it_refuses():
    for args, flag in ((["--workloads", "nonsense"], "--workloads"), (["--rate", "0"], "--rate"),
                       (["--baseline", "/nowhere"], "--baseline")):
        done = run_script("client_cost_bench.py", *args)
        assert done.returncode == 2 and flag in done.stderr and "Traceback" not in done.stderr, (args, done.stderr)


def test_kafka_produce_path_bench_compares_source_trees_round_by_round():
    source = str(BENCHMARKS.parent / "src")
    done = run_script("kafka_produce_path_bench.py", "--requests", "200", "--entry-format", "kafka",
                      "--magnetar", f"one={source}", "--magnetar", f"two={source}", "--rounds", "2")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert list(result["cells"]) == ["one round 1", "two round 1", "two round 2", "one round 2"]
    assert all(cell["entryFormat=kafka"]["requests_per_s"] > 0 for cell in result["cells"].values())
    assert len(result["load_start"]) == 3


def test_consume_cpu_bench_measures_each_tree_and_path():
    """Small sizes, one tree named twice: every path gives a figure for each tree (the script
    waits for the backlog to read 0, so a lost ACK would time it out, not pass)."""
    src = str(BENCHMARKS.parent / "src")
    done = run_script("consume_cpu_bench.py", "--messages", "2000", "--rounds", "1", "--rate", "4000",
                      "--trees", f"a={src},b={src}")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert set(report["results"]) == {"a", "b"}
    for tree in report["results"].values():
        (figures,) = tree["rounds"]
        assert set(figures) == {"publish_only", "backlog_consume_ack", "live_publish_consume_ack"}
        assert figures["publish_only"] > 0 and figures["live_publish_consume_ack"] > 0  # CPU ticks are 10 ms
        assert figures["backlog_consume_ack"] >= 0
