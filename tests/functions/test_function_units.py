"""The functions runtime's parts in process: config rules, code loading, serdes, sequence ids."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import uuid
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pulsar.functions.serde import IdentitySerDe, PickleSerDe

from magnetar.functions import loader, package, sandbox, stats
from magnetar.functions.config import ConfigError, FunctionConfig, parse_json_flag
from magnetar.functions.instance import full_topic, sequence_id
from magnetar.functions.stats_view import prometheus
from magnetar.functions.store import Deployment, FunctionStore
from magnetar.storage import SqliteMetadataStore


def config(**fields: object) -> FunctionConfig:
    return FunctionConfig.from_json({"name": "f", "className": "m.F", "inputs": ["in"], **fields})


def test_pulsars_defaults() -> None:
    made = config()
    assert (made.tenant, made.namespace, made.parallelism) == ("public", "default", 1)
    assert made.processingGuarantees == "ATLEAST_ONCE" and made.output is None and made.autoAck
    assert made.subscription == "public/default/f" and made.subscriptionPosition == "Latest"
    assert not made.failover
    assert config(retainOrdering=True).failover and config(processingGuarantees="EFFECTIVELY_ONCE").failover
    assert config(subName="mine").subscription == "mine"
    assert config(customSerdeInputs={"other": "s.S"}).input_topics == ["in", "other"]
    assert config(jar="ignored.jar", customRuntimeOptions="{}").name == "f"  # Pulsar fields without meaning here
    assert config(resources={"cpu": 1}).scratch_bytes == 256 << 20
    assert config(resources={"disk": 2 << 20}).scratch_bytes == 2 << 20


@pytest.mark.parametrize(("fields", "named"), [
    ({"inputs": []}, "input topics"),
    ({"className": "not a class"}, "className"),
    ({"parallelism": 0}, "parallelism"),
    ({"parallelism": True}, "parallelism"),
    ({"processingGuarantees": "MAYBE"}, "processingGuarantees"),
    ({"subscriptionPosition": "Middle"}, "subscriptionPosition"),
    ({"timeoutMs": -1}, "timeoutMs"),
    ({"maxMessageRetries": "3"}, "maxMessageRetries"),
    ({"deadLetterTopic": "dlq"}, "maxMessageRetries"),
    ({"topicsPattern": "(", "inputs": []}, "topicsPattern"),
    ({"processingGuarantees": "EFFECTIVELY_ONCE", "topicsPattern": "in.*"}, "EFFECTIVELY_ONCE"),
    ({"processingGuarantees": "EFFECTIVELY_ONCE", "maxMessageRetries": 3}, "no dead letters"),
    ({"userConfig": "[]"}, "userConfig"),
    ({"py": "code.jar"}, ".py, .zip or .whl"),
    ({"runtime": "JAVA"}, "PYTHON"),
    ({"inptus": ["x"]}, "inptus"),
    ({"runtimeFlags": "-X importtime"}, "runtimeFlags"),
    ({"resources": {"disk": 10}}, "resources.disk"),
    ({"resources": {"gpu": 1}}, "resources.gpu"),
    ({"resources": {"ram": True}}, "resources.ram"),
])
def test_refusals_name_the_field(fields: dict[str, object], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        config(**fields)


def test_json_flags() -> None:
    assert parse_json_flag("--user-config", '{"a": 1}') == {"a": 1}
    with pytest.raises(ConfigError, match="--user-config is not valid JSON"):
        parse_json_flag("--user-config", "{a")
    with pytest.raises(ConfigError, match="--secrets must be a JSON object"):
        parse_json_flag("--secrets", "[1]")


@pytest.fixture
def module_name(monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh module name (imports are cached per process) and sys.path restored afterwards."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    return f"fn_{uuid.uuid4().hex}"


SOURCE = """
from pulsar import Function

class Upper(Function):
    def process(self, input, context):
        return input.upper() + context

def process(input):
    return input * 2

class Serde:
    def serialize(self, value): return b"s"
    def deserialize(self, data): return "d"

not_callable = 3
"""


def test_a_py_file_its_class_function_and_module(tmp_path: Path, module_name: str) -> None:
    code = tmp_path / f"{module_name}.py"
    code.write_text(SOURCE)
    loader.add_code_to_path(code, tmp_path / "work")
    assert loader.UserFunction.load(f"{module_name}.Upper").call("a", "!") == "A!"
    assert loader.UserFunction.load(f"{module_name}.process").call("a", None) == "aa"
    assert loader.UserFunction.load(module_name).call("b", None) == "bb"  # a module's process(input)
    with pytest.raises(loader.CodeError, match="has no Missing"):
        loader.UserFunction.load(f"{module_name}.Missing")
    with pytest.raises(loader.CodeError, match="neither a class nor a function"):
        loader.UserFunction.load(f"{module_name}.not_callable")
    assert loader.serde(f"{module_name}.Serde").deserialize(b"") == "d"


def test_a_zip_in_pulsars_layout_with_a_dependency_wheel(tmp_path: Path, module_name: str) -> None:
    wheel = tmp_path / f"{module_name}_dep-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(f"{module_name}_dep.py", "SUFFIX = '?'\n")
    package = tmp_path / "fn.zip"
    with zipfile.ZipFile(package, "w") as archive:
        archive.writestr(f"fn/src/{module_name}.py",
                         f"from {module_name}_dep import SUFFIX\ndef process(input):\n    return input + SUFFIX\n")
        archive.write(wheel, f"fn/deps/{wheel.name}")
    loader.add_code_to_path(package, tmp_path / "work")
    assert loader.UserFunction.load(f"{module_name}.process").call("x", None) == "x?"


def test_a_wheel(tmp_path: Path, module_name: str) -> None:
    wheel = tmp_path / f"{module_name}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(f"{module_name}/__init__.py", "def process(input):\n    return -input\n")
    loader.add_code_to_path(wheel, tmp_path / "work")
    assert loader.UserFunction.load(f"{module_name}.process").call(4, None) == -4


def test_code_errors(tmp_path: Path, module_name: str) -> None:
    code = tmp_path / f"{module_name}.py"
    code.write_text("import not_there_at_all\n")
    loader.add_code_to_path(code, tmp_path / "work")
    with pytest.raises(loader.CodeError, match=r"importing .* raised ModuleNotFoundError.*not_there_at_all"):
        loader.UserFunction.load(f"{module_name}.F")
    with pytest.raises(loader.CodeError, match="no module named 'nowhere'"):
        loader.UserFunction.load("nowhere.F")
    not_zip = tmp_path / "f.zip"
    not_zip.write_text("plain text")
    with pytest.raises(loader.CodeError, match="not a zip archive"):
        loader.add_code_to_path(not_zip, tmp_path / "work")


def test_serde_names() -> None:
    for name in (None, "", "serde.IdentitySerDe", "IdentitySerDe", "pulsar.functions.serde.IdentitySerDe"):
        assert type(loader.serde(name)) is IdentitySerDe, name
    assert type(loader.serde("serde.PickleSerDe")) is PickleSerDe


def test_full_topic_names() -> None:
    assert full_topic("in") == "persistent://public/default/in"
    assert full_topic("t/n/in") == "persistent://t/n/in"
    assert full_topic("non-persistent://t/n/in") == "non-persistent://t/n/in"


class Position:
    def __init__(self, ledger: int, entry: int, batch: int) -> None:
        self.position = (ledger, entry, batch)

    def ledger_id(self) -> int:
        return self.position[0]

    def entry_id(self) -> int:
        return self.position[1]

    def batch_index(self) -> int:
        return self.position[2]


def _edges(low: int, high: int) -> st.SearchStrategy[int]:
    """Values at both ends of a field, where fields would overlap if a shift were short."""
    return st.one_of(st.integers(low, low + 3), st.integers(high - 3, high))


POSITIONS = st.tuples(_edges(0, 2**23 - 1), _edges(0, 2**26 - 1), _edges(-1, 2**14 - 1))


@given(POSITIONS, POSITIONS)
def test_sequence_ids_increase_with_input_positions(a: tuple[int, int, int], b: tuple[int, int, int]) -> None:
    """EFFECTIVELY_ONCE's deduplication drops an output whose sequence id is not above the
    last: a later input must map to a larger id, a repeated one to the same."""
    first, second = sequence_id(Position(*a)), sequence_id(Position(*b))
    normal = (a[0], a[1], max(a[2], 0)), (b[0], b[1], max(b[2], 0))
    assert (first < second) == (normal[0] < normal[1]) and (first == second) == (normal[0] == normal[1])
    assert 0 <= first < 2**63


def test_user_metric_names_become_valid_prometheus_names() -> None:
    """A `record_metric` name with a space or a dash must not break /metrics' exposition format."""
    config = SimpleNamespace(tenant="t", namespace="n", name='fn"x', fqfn='t/n/fn"x')
    instance = SimpleNamespace(instance_id=0, metrics=lambda: {
        "numReceived": 3, "lastInvocationTime": None,
        "userMetrics": {"latency ms": {"sum": 1.5, "count": 2}, "hits-total": {"sum": 4, "count": 4}}})
    runtime = SimpleNamespace(deployment=SimpleNamespace(config=config), instances=[instance])
    text = prometheus([runtime], "standalone")  # type: ignore[list-item]
    sample = re.compile(r'^[a-zA-Z_:][a-zA-Z0-9_:]*\{([a-z_]+="(?:[^"\\]|\\.)*",?)*\} -?[0-9.e+]+$')
    samples = [line for line in text.splitlines() if not line.startswith("#")]
    assert samples and all(sample.match(line) for line in samples), text
    assert any(line.startswith("pulsar_function_user_metric_latency_ms_sum{") and line.endswith(" 1.5")
               for line in samples)
    assert any(line.startswith("pulsar_function_last_invocation{") and line.endswith(" 0") for line in samples)


@pytest.mark.parametrize(("py", "shown", "stored"), [
    ("exclamation.py", "exclamation.py", "exclamation.py"),
    ("/home/me/code/exclamation.py", "exclamation.py", "exclamation.py"),
    ("../../../etc/cron.d/x.py", "x.py", "x.py"),
    ("C:\\code\\fn.zip", "fn.zip", "fn.zip"),
    ("..\\..\\x.whl", "x.whl", "x.whl"),
    ("a b.py", "a b.py", "function.py"),
    ("....py", "....py", "function.py"),
    (".hidden.py", ".hidden.py", "function.py"),
])
def test_the_code_is_stored_under_a_plain_name(py: str, shown: str, stored: str) -> None:
    made = config(py=py)
    assert made.py == shown
    assert package.stored_name(made.py) == stored


@pytest.mark.parametrize("name", ["..", ".", "a/b", "", "a\x00", "x" * 256, "a b"])
def test_names_that_are_no_directory_of_their_own_are_refused(name: str) -> None:
    for key in ("tenant", "namespace", "name"):
        with pytest.raises(ConfigError, match=key):
            config(**{key: name})


def test_class_names_are_read_from_the_code_without_importing_it(tmp_path: Path) -> None:
    """`className` and serdes must be classes or functions the uploaded code defines (re-exports
    between its modules included), never a name imported from elsewhere; nothing is imported."""
    wheel = tmp_path / "dep-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("dep_serdes.py", "class Serde:\n    pass\n")
    code = tmp_path / "fn.zip"
    with zipfile.ZipFile(code, "w") as archive:
        archive.writestr("fn/src/pkg_x/__init__.py", "from .impl import Fn\nfrom os import system\nraise SystemExit\n")
        archive.writestr("fn/src/pkg_x/impl.py", "import sys\ntry:\n    class Fn:\n        pass\nexcept Exception:\n"
                                                 "    pass\n")
        archive.writestr("fn/src/mod_x.py", "def process(value):\n    return value\n")
        archive.writestr("fn/src/broken_x.py", "def (:\n")
        archive.write(wheel, f"fn/deps/{wheel.name}")
    for class_name, serdes in (("pkg_x.Fn", ["dep_serdes.Serde"]), ("pkg_x.impl.Fn", []), ("mod_x", []),
                               ("mod_x.process", ["pkg_x.Fn"])):
        package.check_names(code, class_name, serdes)
    for class_name, serdes, reason in (
            ("pkg_x.system", [], "names no class or function defined in the uploaded code"),
            ("os.system", [], "os is a module of Python or of the function runtime"),
            ("magnetar.functions.instance.Instance", [], "magnetar is a module of Python or of the function runtime"),
            ("mod_x.process", ["mod_x.process"], "mod_x.process is a function; a serde must be a class"),
            ("broken_x.F", [], "module broken_x cannot be parsed")):
        with pytest.raises(package.PackageError, match=re.escape(reason)):
            package.check_names(code, class_name, serdes)
    assert not {"pkg_x", "mod_x", "dep_serdes", "broken_x"} & set(sys.modules)


@pytest.mark.parametrize(("line", "kept"), [
    (b'{"numReceived": 3, "averageLatency": 1.5}', {"numReceived": 3, "averageLatency": 1.5}),
    (b'{"numReceived": "3\\nfake 1", "lastInvocationTime": true}', {}),
    (b'{"numReceived": -1, "averageLatency": NaN}', {}),
    (b'{"latestUserExceptions": [{"exceptionString": "boom", "timestampMs": 5}, {"exceptionString": 3}]}',
     {"latestUserExceptions": [{"exceptionString": "boom", "timestampMs": 5}]}),
    (b'{"userMetrics": {"m": {"sum": 2, "count": 1}, "bad": {"sum": "x", "count": 1}}}',
     {"userMetrics": {"m": {"sum": 2.0, "count": 1}}}),
    (b'{"openTransaction": [0, 42]}', {"openTransaction": [0, 42]}),
    (b'{"openTransaction": [0, -1]}', {}), (b'{"openTransaction": [0, 1, 2]}', {}),
    (b'{"openTransaction": "0,1"}', {}), (b'{"openTransaction": [true, 1]}', {}),
    (b"[1, 2]", None), (b"not json", None), (b"[" * 100_000, None), (b'{"a": "' + b"x" * 300_000 + b'"}', None),
])
def test_a_stats_line_keeps_only_values_of_the_right_type(line: bytes, kept: dict[str, object] | None) -> None:
    """What an instance sends on its stats pipe is read as a client's input: the function's
    code could send anything there."""
    assert stats.parse(line) == kept


@pytest.mark.skipif(not shutil.which("bwrap"), reason="needs Debian's bubblewrap")
def test_a_python_installation_under_tmp_is_seen_in_the_sandbox(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkout or venv under /tmp (a CI clone) is bound over the sandbox's private /tmp, not
    hidden by it: the scratch tmpfs was mounted after the installation's binds, and every
    sandboxed instance then failed with `execvp .../python3: No such file or directory`."""
    installation = Path(tempfile.mkdtemp(dir="/tmp"))
    try:
        (installation / "marker").write_text("seen")
        monkeypatch.setattr(sandbox, "python_roots", lambda: [str(installation)])
        isolation = sandbox.Isolation("bubblewrap", shutil.which("bwrap"), None, sandbox.sandbox_options(None, []))
        argv = isolation.launch(tmp_path / "code.py", tmp_path, 1 << 20).argv
        command = [*argv[:argv.index("--")], "--", "/usr/bin/cat", str(installation / "marker")]
        done = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)
        assert (done.returncode, done.stdout) == (0, "seen"), done.stderr
    finally:
        shutil.rmtree(installation)


def test_deleting_a_function_takes_its_config_code_and_state_and_nothing_of_another(tmp_path: Path) -> None:
    metadata = SqliteMetadataStore(tmp_path / "metadata.db")
    try:
        store = FunctionStore(metadata)
        for name in ("f", "f2"):  # f2 shares f's name as a prefix
            store.save(Deployment(FunctionConfig(name=name, className="m.F", inputs=["in"])), b"code")
            store.put_state(f"public/default/{name}", "count", {"numberValue": 1})
            store.put_state(f"public/default/{name}", "note", {"stringValue": "x"})
        store.delete("public/default/f")
        assert (store.get("public/default/f"), store.code("public/default/f")) == (None, None)
        assert store.state("public/default/f", "count") is None and store.state("public/default/f", "note") is None
        assert store.get("public/default/f2") is not None and store.code("public/default/f2") == b"code"
        assert store.state("public/default/f2", "count")["numberValue"] == 1
    finally:
        metadata.close()
