"""tools/system.py: one apt-get install path (run against a fake apt-get), the data probe, the
Debian packages the sessions install, the MXNet build."""

import stat

import pytest

from tools import system

# A fake apt-get: records its arguments; `install` fails until `update` has run (as on a fresh
# machine, whose package lists are empty), or always with FAIL=1.
FAKE_APT = """#!/bin/sh
echo "$*" >> "$(dirname "$0")/calls"
case "$1" in
  update) touch "$(dirname "$0")/lists";;
  install) [ -f "$(dirname "$0")/lists" ] && [ ! -f "$(dirname "$0")/broken" ] || exit 100;;
esac
"""


@pytest.fixture
def apt(tmp_path):
    """The path of a fake apt-get; its calls are the lines of ``calls`` beside it."""
    script = tmp_path / "apt-get"
    script.write_text(FAKE_APT)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def calls(apt):
    path = apt.parent / "calls"
    return path.read_text().splitlines() if path.is_file() else []


def test_apt_install_refreshes_the_lists_and_tries_again(apt):
    assert system.apt_install(str(apt), ["fonts-noto-cjk"], recommends=False)
    install = "install -y -q --no-install-recommends fonts-noto-cjk"
    assert calls(apt) == [install, "update -q", install]


def test_apt_install_once_when_the_lists_are_there(apt):
    (apt.parent / "lists").touch()
    assert system.apt_install(str(apt), ["g++", "make"])
    assert calls(apt) == ["install -y -q g++ make"]


def test_apt_install_says_when_it_fails(apt):
    (apt.parent / "broken").touch()
    assert not system.apt_install(str(apt), ["chromium"])
    assert calls(apt) == ["install -y -q chromium", "update -q", "install -y -q chromium"]


def test_mxnet_extra_can_be_chosen():
    assert system.mxnet_extra({"MGPU_EXTRA": "cpu"}) == "cpu"
    assert system.mxnet_extra({"MGPU_EXTRA": "gpu"}) == "gpu"
    assert system.mxnet_extra({"MGPU_EXTRA": "tpu"}) in ("cpu", "gpu")  # not a choice: detected


class FakeVenv:
    """``session.run`` for the data probe: the data is there once ``present`` says so."""

    def __init__(self, present):
        self.present, self.probes = present, []

    def run(self, *command, silent):
        assert command[:2] == ("python", "-c") and silent
        self.probes.append("download=True" in command[2])
        return "DATA-OK\n" if self.present(self) else "Fashion-MNIST not found in /nowhere\n"


def test_ensure_data_does_nothing_when_the_data_is_there(apt):
    venv, log = FakeVenv(lambda venv: True), []
    system.ensure_data(venv.run, log.append, str(apt))
    assert venv.probes == [False] and log == [] and calls(apt) == []


def test_ensure_data_installs_debians_package(apt):
    venv, log = FakeVenv(lambda venv: (apt.parent / "lists").is_file()), []
    system.ensure_data(venv.run, log.append, str(apt))
    assert venv.probes == [False, True]
    assert log == ["Fashion-MNIST not found: installing Debian's dataset-fashion-mnist"]
    assert calls(apt)[-1] == "install -y -q dataset-fashion-mnist"


def test_ensure_data_says_how_to_get_the_data():
    venv, log = FakeVenv(lambda venv: False), []
    with pytest.raises(system.SetupError, match="(?s)not found in /nowhere.*MGPU_DATA_DIR"):
        system.ensure_data(venv.run, log.append, None)
    assert venv.probes == [False, True]  # MXNet's download was tried


def test_ensure_cjk_fonts(monkeypatch, apt):
    monkeypatch.setattr(system, "has_cjk_font", lambda family: False)
    log = []
    system.ensure_cjk_fonts(log.append, None)
    assert log == ["Chinese fonts missing: install fonts-noto-cjk fonts-wqy-microhei (Debian) "
                   "for the Chinese edition"]
    system.ensure_cjk_fonts(log.append, str(apt))
    assert calls(apt)[-1] == ("install -y -q --no-install-recommends fonts-noto-cjk "
                              "fonts-wqy-microhei")
    # Only what is missing.
    monkeypatch.setattr(system, "has_cjk_font", lambda family: family == "Noto Sans CJK")
    system.ensure_cjk_fonts(log.append, str(apt))
    assert calls(apt)[-1] == "install -y -q --no-install-recommends fonts-wqy-microhei"
    monkeypatch.setattr(system, "has_cjk_font", lambda family: True)
    system.ensure_cjk_fonts(log.append, str(apt))
    assert len(log) == 3 and len(calls(apt)) == 4  # nothing more


def test_ensure_sshd_only_where_services_do_not_start(tmp_path, apt):
    sshd, policy, log = tmp_path / "sshd", tmp_path / "policy-rc.d", []
    system.ensure_sshd(log.append, str(apt), sshd, policy)  # no policy-rc.d: not installed
    assert calls(apt) == [] and "will be skipped" in log[0]
    policy.write_text("#!/bin/sh\nexit 101\n")  # Debian's answer: do not start services
    policy.chmod(0o755)
    system.ensure_sshd(log.append, str(apt), sshd, policy)
    assert calls(apt)[-1] == "install -y -q --no-install-recommends openssh-server"
    sshd.touch()
    system.ensure_sshd(log.append, None, sshd, policy)
    assert len(log) == 1


def test_ensure_chromium(tmp_path, apt):
    chromium, log = tmp_path / "chromium", []
    system.ensure_chromium(chromium, log.append, None)
    assert log == [] and calls(apt) == []
    system.ensure_chromium(chromium, log.append, str(apt))
    assert calls(apt)[-1] == "install -y -q chromium" and "chromium" in log[0]


def test_ensure_iproute2(apt):
    found = {"ip": "/usr/sbin/ip", "tc": "/usr/sbin/tc"}
    log = []
    system.ensure_iproute2(log.append, str(apt), found.get)  # both there: nothing to do
    assert log == [] and calls(apt) == []
    del found["tc"]
    system.ensure_iproute2(log.append, None, found.get)  # not root: says what to install
    assert log == ["iproute2 is not installed: no emulated hosts (their tests are skipped, the "
                   "chapters measure on loopback); apt-get install iproute2"]
    system.ensure_iproute2(log.append, str(apt), found.get)
    assert calls(apt)[-1] == "install -y -q --no-install-recommends iproute2"
    assert len(log) == 2
