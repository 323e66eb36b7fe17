"""Files the project ships for others to run: the example CI workflow and the Vagrantfile.

- the workflow is valid YAML and every command in it is one the project has, with options
  its own parsers accept;
- the Vagrantfile is evaluated by Ruby (against a stand-in for Vagrant that records every
  setting), boots a Debian or Ubuntu box, and provisions it with scripts/install.sh, the
  installer ./run, and so .ci/run, uses.
"""
from __future__ import annotations

import glob
import json
import os
import re
import shlex
import shutil
import subprocess

import pytest
import yaml

from cli.main import build_parser
from cli.report import build_parser as report_parser

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORKFLOWS = sorted(glob.glob(os.path.join(REPO, "examples", "github-actions", "*.yml")))


def _matrix_value(job: dict, match: re.Match) -> str:
    """A ``${{ matrix.NAME }}`` as the job's first cell has it."""
    return str(job["strategy"]["matrix"][match.group(1)][0])


def workflow_commands(path: str) -> list[list[str]]:
    """The project's commands of one workflow, each cell's matrix values put in (its first cell's)."""
    with open(path) as f:
        flow = yaml.safe_load(f)
    assert flow["name"] and flow["jobs"], "no jobs"
    commands = []
    for job in flow["jobs"].values():
        assert job.get("runs-on") and job.get("steps")
        for step in job["steps"]:
            assert ("run" in step) != ("uses" in step), f"a step runs a command or uses an action: {step}"
            if "run" in step:
                run = re.sub(r"\$\{\{\s*matrix\.(\w+)\s*\}\}", lambda m, job=job: _matrix_value(job, m), step["run"])
                for part in re.split(r"&&|\|\||;|\n", run):
                    words = shlex.split(part)
                    if words and words != ["true"] and words[0] != "git":
                        commands.append(words[1:] if words[0] == "sudo" else words)
    return commands


def all_commands() -> list[list[str]]:
    return [c for path in WORKFLOWS for c in workflow_commands(path)]


def test_the_workflows_are_yaml_with_commands():
    assert [os.path.basename(p) for p in WORKFLOWS] == ["ipsec-history.yml", "ipsec-regress.yml"]
    for path in WORKFLOWS:
        assert len(workflow_commands(path)) >= 4, path


@pytest.mark.parametrize("argv", all_commands(), ids=lambda a: " ".join(a[:3]))
def test_every_workflow_command_is_the_projects_and_parses(argv, capsys):
    program, args = argv[0], argv[1:]
    if program == "./run":
        with open(os.path.join(REPO, "run")) as f:
            commands = re.search(r"^\s+(\S+)\) ;;$", f.read(), re.M).group(1).split("|")
        assert args and args[0] in commands, f"./run has no command {args[:1]} ({commands})"
        return
    assert program == ".venv/bin/ipsec-testbed", f"not a command of the project: {program}"
    if args[0] == "report":
        report_parser().parse_args(args[1:])
    else:
        build_parser().parse_args(args)  # exits (fails the test) on anything it does not accept
    assert capsys.readouterr().err == ""


RECORDER = r"""
require 'json'
$calls = []
class Recorder
  def initialize(path) @path = path end
  def method_missing(name, *args, **kw, &blk)
    path = @path + [name.to_s]
    $calls << {"path" => path.join("."), "args" => args.map(&:to_s),
               "kw" => kw.map { |k, v| [k.to_s, v.to_s] }.to_h}
    blk.call(Recorder.new(path)) if blk
    Recorder.new(path)
  end
  def respond_to_missing?(*) true end
end
module Vagrant
  def self.configure(version)
    $calls << {"path" => "configure", "args" => [version], "kw" => {}}
    yield Recorder.new(["config"])
  end
end
load ARGV[0]
puts JSON.generate($calls)
"""


def test_the_vagrantfile_provisions_with_the_installer_ci_uses(tmp_path):
    ruby = shutil.which("ruby")
    assert ruby, "ruby not found: scripts/install.sh installs it (the Vagrantfile is Ruby)"
    stub = tmp_path / "recorder.rb"
    stub.write_text(RECORDER)
    out = subprocess.run([ruby, str(stub), os.path.join(REPO, "Vagrantfile")], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    calls = {c["path"]: c for c in json.loads(out.stdout)}
    assert calls["configure"]["args"] == ["2"]
    assert re.match(r"^(debian|ubuntu|bento|generic)/", calls["config.vm.box="]["args"][0])
    provision = calls["config.vm.provision"]
    assert provision["args"] == ["shell"]
    assert re.search(r"^\s*\./scripts/install\.sh\s*$", provision["kw"]["inline"], re.M)
    # ... the same installer as CI: .ci/run runs ./run test, which runs scripts/install.sh first
    with open(os.path.join(REPO, ".ci", "run")) as f:
        assert re.search(r"^\s*(sudo |as_root )?\./run test", f.read(), re.M)
    with open(os.path.join(REPO, "run")) as f:
        assert re.search(r"^scripts/install\.sh$", f.read(), re.M)


def test_a_broken_vagrantfile_is_caught(tmp_path):
    # the check above can fail: Ruby rejects a Vagrantfile with a syntax error
    ruby = shutil.which("ruby")
    assert ruby, "ruby not found: scripts/install.sh installs it"
    stub, broken = tmp_path / "recorder.rb", tmp_path / "Vagrantfile"
    stub.write_text(RECORDER)
    broken.write_text('Vagrant.configure("2") do |config|\n  config.vm.box = "debian/bookworm64"\n')
    out = subprocess.run([ruby, str(stub), str(broken)], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "syntax error" in out.stderr
