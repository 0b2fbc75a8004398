"""The README's code blocks run as written, and its set-up commands are the ones CI uses."""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def test_readme_python_blocks_run(capsys):
    blocks = re.findall(r"```python\n(.*?)```", README, flags=re.S)
    assert len(blocks) >= 2
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, "README.md", "exec"), namespace)
    assert "(32, 4) (32,)" in capsys.readouterr().out


def test_ci_runs_the_readme_test_command():
    commands = re.findall(r"```bash\n(.*?)\n```", README, flags=re.S)
    test_command = next(c for c in commands if "pytest" in c)
    ci = (ROOT / ".ci" / "run").read_text()
    install, run = test_command.split(" && ")[-2:]
    assert install.replace("pip install", "python -m pip install") in ci
    assert f"python -m {run.split()[-1]}" in ci or run in ci
