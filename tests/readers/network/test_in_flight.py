"""readers.network.in_flight: gathers split over requests and requests shared by gathers, answered in parts."""
import numpy as np

from readers.network.in_flight import Job, Read, Request


def request_of(*pieces):
    r = Request()
    for job, start, stop in pieces:
        r.add(job, start, job.indices[start:stop])
    return r.seal()


def test_a_request_shared_by_jobs_hands_each_its_rows_as_views():
    a, b = Job(np.arange(10, 13)), Job(np.array([7, 2]))
    r = request_of((a, 0, 3), (b, 0, 2))
    assert r.rows == 5 and r.order() == (a.seq, 0)
    answer = (np.arange(5) * 10, np.arange(5, dtype=np.float32))
    r.place(0, 2, tuple(c[:2] for c in answer))  # the answer in two parts
    assert not a.done()
    r.place(2, 3, tuple(c[2:] for c in answer))
    assert a.done() and b.done()
    assert [c.tolist() for c in a.result()] == [[0, 10, 20], [0.0, 1.0, 2.0]]
    assert [c.tolist() for c in b.result()] == [[30, 40], [3.0, 4.0]]
    assert np.shares_memory(b.result()[0], answer[0])  # one part each: views, not copies


def test_a_job_split_over_requests_is_copied_together_in_order():
    job = Job(np.arange(100, 106))
    first, second = request_of((job, 0, 4)), request_of((job, 4, 6))
    second.place(0, 2, np.array([[4, 4], [5, 5]]))  # answers may arrive in any order
    first.place(0, 4, np.array([[0, 0], [1, 1], [2, 2], [3, 3]]))
    assert job.done() and job.result()[:, 0].tolist() == [0, 1, 2, 3, 4, 5]


def test_rebase_asks_again_for_the_rows_not_received_only():
    a, b = Job(np.array([1, 2, 3])), Job(np.array([8, 9]))
    r = request_of((a, 0, 3), (b, 0, 2))
    r.place(0, 4, np.array([10, 20, 30, 80]))
    r.got = 4
    r.rebase()
    assert (r.rows, r.got, r.indices.tolist()) == (1, 0, [9])
    assert r.header(3) == {"type": "get", "id": 3, "interval": [9, 9]}
    r.place(0, 1, np.array([90]))
    assert a.result().tolist() == [10, 20, 30] and b.result().tolist() == [80, 90]


def test_a_run_of_indices_is_asked_for_as_an_interval_and_others_as_a_list():
    job = Job(np.array([5, 6, 7, 9]))
    assert request_of((job, 0, 3)).header(1) == {"type": "get", "id": 1, "interval": [5, 7]}
    assert request_of((job, 1, 4)).header(2) == {"type": "get", "id": 2, "indices": [6, 7, 9]}
    assert request_of((job, 2, 4)).header(3)["indices"] == [7, 9]


def test_an_empty_job_is_done_once_its_typed_empty_answer_arrives():
    job = Job(np.zeros(0, np.int64))
    r = request_of((job, 0, 0))
    assert r.header(1) == {"type": "get", "id": 1, "indices": []} and not job.done()
    r.place(0, 0, (np.zeros((0, 3), np.uint8), np.zeros(0, np.int64)))
    assert job.done() and [c.shape for c in job.result()] == [(0, 3), (0,)]


def test_parts_of_other_string_widths_are_joined_without_cutting_any():
    """Regression: the joined column took the first part's dtype, so longer strings of a later part were cut."""
    job = Job(np.arange(3))
    request_of((job, 0, 2)).place(0, 2, np.array(["a", "b"]))
    request_of((job, 2, 3)).place(0, 1, np.array(["abcdefghij"]))
    assert job.result().tolist() == ["a", "b", "abcdefghij"]


def read_of(*chunks, **limits):
    options = {"whole": True, "in_flight": 8, "request_rows": 100, "index_rows": 100, "whole_rows": 100, **limits}
    return Read(iter([np.asarray(c, np.int64) for c in chunks]), None, **options)


def test_read_keeps_requests_in_the_order_of_their_jobs_around_an_empty_gather():
    """An empty gather's request went to the queue before the request still being built for the gather before it;
    with only the first job's requests sent before the first hand-over (issue 27), that read would wait forever."""
    read = read_of([0, 1], [], [4, 5], in_flight=1)
    read.take_chunks()
    assert [request.segments[0][0] for request in read.waiting] == list(read.jobs)[:2]


def test_read_splits_a_job_larger_than_its_whole_rows_into_requests_of_request_rows():
    read = read_of(np.arange(10), [20, 21], request_rows=4, whole_rows=6)
    read.take_chunks()
    assert [request.header(0).get("interval") or request.header(0)["indices"] for request in read.waiting] == \
        [[0, 3], [4, 7], [8, 9, 20, 21]]
