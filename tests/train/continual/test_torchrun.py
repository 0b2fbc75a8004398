"""The loopback torchrun launcher a pipeline's --nproc trainings use (and tests/helpers/torchrun_job.py)."""
import sys

from train.continual.torchrun import loopback_env, loopback_interface, torchrun_command


def test_torchrun_command_runs_this_python_with_the_loopback_launcher():
    command = torchrun_command(["-m", "train.continual.ranks", "spec.json"], nproc=3, max_restarts=2)
    assert command == [sys.executable, "-m", "train.continual.torchrun", "--nnodes", "1", "--nproc-per-node", "3",
                       "--max-restarts", "2", "-m", "train.continual.ranks", "spec.json"]


def test_loopback_env_pins_gloo_to_the_loopback_interface_and_keeps_the_rest():
    env = loopback_env({"PATH": "/bin", "GLOO_SOCKET_IFNAME": "eth0"})
    assert env["PATH"] == "/bin"
    assert env["GLOO_SOCKET_IFNAME"] == (loopback_interface() or "eth0")
