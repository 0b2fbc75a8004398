"""Helpers shared by the tests: toy readers, jobs run in other processes, servers, waits."""
