"""setup.cfg's extras: each optional capability names what it installs, and the test extra installs what the tests
import (.ci/run installs the project with ``pip install -e '.[test]'`` and nothing else but torch)."""
import configparser
import pathlib

from packaging.requirements import Requirement

ROOT = pathlib.Path(__file__).resolve().parents[1]


def extra(name: str) -> dict[str, Requirement]:
    """The requirements of setup.cfg's extra ``name``, by project name."""
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    lines = config["options.extras_require"][name].splitlines()
    found = [Requirement(line) for line in lines if line.strip() and not line.lstrip().startswith("#")]
    return {r.name.lower(): r for r in found}


def test_cloud_extra_installs_fsspec_s3fs_and_aiohttp_with_lower_bounds():
    # issue 29: http(s):// and s3:// paths go through fsspec, optional as `pip install readerkit[cloud]`
    cloud = extra("cloud")
    assert sorted(cloud) == ["aiohttp", "fsspec", "s3fs"]
    assert all(r.specifier and all(s.operator == ">=" for s in r.specifier) for r in cloud.values())


def test_test_extra_installs_the_cloud_extra_and_motos_server():
    # issue 29: the URL tests run against moto's S3 server (its `server` extra brings flask) and fsspec's http
    test = extra("test")
    assert set(extra("cloud")) <= set(test)
    assert {name: str(test[name].specifier) for name in extra("cloud")} == {
        name: str(r.specifier) for name, r in extra("cloud").items()}  # one lower bound for both
    assert "server" in test["moto"].extras
