"""readers.allocator: tune_allocator tunes glibc malloc once per process, and only when allowed."""
import pytest

from readers import allocator


@pytest.fixture
def fresh(monkeypatch):
    """tune_allocator as in a new process, recording the thresholds it would set instead of setting them."""
    calls = []

    def record(mmap_threshold, trim_threshold):
        calls.append((mmap_threshold, trim_threshold))
        return True

    monkeypatch.setattr(allocator, "_tuned", [])
    monkeypatch.setattr(allocator, "_set_thresholds", record)
    return calls


def test_tune_allocator_sets_the_thresholds_once(fresh):
    assert allocator.tune_allocator(mmap_threshold=1 << 20, trim_threshold=2 << 20) is True
    assert allocator.tune_allocator() is True
    assert fresh == [(1 << 20, 2 << 20)]


@pytest.mark.parametrize("variable, value", [("READERKIT_MALLOC", "system"), ("READERKIT_MALLOC", "SYSTEM"),
                                             ("MALLOC_MMAP_THRESHOLD_", "65536"), ("MALLOC_TOP_PAD_", "0")])
def test_tune_allocator_leaves_a_users_malloc_settings_alone(fresh, monkeypatch, variable, value):
    monkeypatch.setenv(variable, value)
    assert allocator.tune_allocator() is False
    assert fresh == []


def test_tune_allocator_reports_the_outcome_of_the_real_call(monkeypatch):
    monkeypatch.setattr(allocator, "_tuned", [])
    outcome = allocator.tune_allocator()
    assert isinstance(outcome, bool) and allocator.tune_allocator() is outcome
