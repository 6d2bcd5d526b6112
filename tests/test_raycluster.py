"""Waiting for a job's Ray cluster: ready when all nodes and GPUs show, a clear failure if not."""

from __future__ import annotations

import json

import pytest

from evalpipe.run.raycluster import ClusterView, failure, listed_nodes, wait_for


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_ready_once_every_node_and_gpu_is_there() -> None:
    answers = iter(
        [
            ConnectionError("head not up"),
            ClusterView(nodes=1, gpus=4, listed=1),
            ClusterView(nodes=2, gpus=8, listed=2),
        ]
    )

    def view() -> ClusterView:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    clock = Clock()
    ready, last, error = wait_for(
        view, nodes=2, gpus=8, timeout_s=60, clock=clock, sleep=clock.sleep
    )
    assert ready and last == ClusterView(nodes=2, gpus=8, listed=2) and error == ""
    assert clock.now == pytest.approx(4.0)  # two polls of 2 s


def test_gives_up_at_the_deadline_with_what_it_saw() -> None:
    clock = Clock()
    ready, last, _ = wait_for(
        lambda: ClusterView(nodes=1, gpus=4, listed=1),
        nodes=2,
        gpus=8,
        timeout_s=10,
        clock=clock,
        sleep=clock.sleep,
    )
    assert not ready and last == ClusterView(nodes=1, gpus=4, listed=1)
    assert clock.now == pytest.approx(10.0)


def test_reports_the_last_connection_error() -> None:
    def view() -> ClusterView:
        raise ConnectionError("GCS at 10.0.0.1:6379 unreachable")

    clock = Clock()
    ready, last, error = wait_for(
        view, nodes=1, gpus=0, timeout_s=4, clock=clock, sleep=clock.sleep
    )
    assert not ready and last is None
    assert error == "ConnectionError: GCS at 10.0.0.1:6379 unreachable"


def test_not_ready_until_the_status_report_lists_every_node_the_gcs_has() -> None:
    answers = iter(
        [
            ClusterView(nodes=2, gpus=8, listed=1),  # `ray status` would still show one node
            ClusterView(nodes=2, gpus=8, listed=2),
        ]
    )
    clock = Clock()
    ready, last, _ = wait_for(
        lambda: next(answers), nodes=2, gpus=8, timeout_s=60, clock=clock, sleep=clock.sleep
    )
    assert ready and last == ClusterView(nodes=2, gpus=8, listed=2)
    assert clock.now == pytest.approx(2.0)


def test_listed_nodes_counts_active_and_idle_nodes_of_the_report() -> None:
    report = {
        "autoscaler_report": {
            "active_nodes": {"node_aa": 1, "node_bb": 1},
            "idle_nodes": {"node_cc": 1},
            "pending_nodes": [],
        }
    }
    assert listed_nodes(json.dumps(report).encode()) == 3
    assert listed_nodes(json.dumps({"autoscaler_report": {"idle_nodes": None}}).encode()) == 0
    assert listed_nodes(None) == 0  # the autoscaler has not written its first report


def test_a_failed_wait_names_the_node_that_never_joined() -> None:
    last = ClusterView(nodes=1, gpus=1, listed=1, joined=frozenset({"node1"}))
    message = failure(
        "10.0.0.1:6379", nodes=2, gpus=2, timeout_s=180, last=last, error="",
        names=("node1", "node2"),
    )  # fmt: skip
    assert message == (
        "evalpipe: the Ray cluster at 10.0.0.1:6379 did not reach 2 node(s) and 2 GPU(s) within "
        "180 s (saw 1 node(s) alive, 1 in `ray status`, 1 GPU(s)). Never joined: node2. See the "
        "Ray step output of node2 above."
    )
    nothing = failure(
        "10.0.0.1:6379", nodes=2, gpus=2, timeout_s=120, last=None,
        error="ConnectionError: refused", names=("node1", "node2"),
    )  # fmt: skip
    assert "(saw no answer; ConnectionError: refused). Never joined: node1, node2." in nothing
