"""Bad input, chosen as a new user would type it (issue 46), across ``plan``, ``report``,
``doctor``, ``matrix``, ``strategies`` and the ``KV_STRATEGIES*`` variables: each one line on
stderr (argparse's own mistakes: its usage line, then that line), the exit status expected
(2: bad input; 1: vLLM's refusal, or a switch with which vLLM would stop), no traceback, never
an answer with exit 0. Run in-process on real files: a tiny Llama ``config.json``, real KV
cache reports (``test_report.reports``) and a real plan file."""

from __future__ import annotations

import json
import re
import shutil

import pytest
from test_report import reports  # noqa: F401  (the module-scoped real reports)

from vllm_kv_strategies.__main__ import main
from vllm_kv_strategies.deploy import cli

LLAMA = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64, "num_hidden_layers": 8, "vocab_size": 512,
    "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "torch_dtype": "bfloat16",
}
#: config.json contents of the model directories the cases name (None: no config.json).
MODELS = {
    "M": json.dumps(LLAMA), "EMPTYDIR": None, "EMPTYCONFIG": "", "BADJSON": "{bad", "LIST": "[1, 2]",
    "STRING": '"LlamaForCausalLM"', "NULL": "null", "NOARCH": json.dumps({"model_type": "llama"}),
    "NOARCHS": json.dumps({**LLAMA, "architectures": []}), "NUMARCH": json.dumps({**LLAMA, "architectures": [1]}),
    "UNKNOWNARCH": json.dumps({**LLAMA, "architectures": ["NoSuchForCausalLM"]}),
    "REMOTE": json.dumps({**LLAMA, "model_type": "no-such-type", "auto_map": {"AutoConfig": "x.Y"}}),
    "BINARY": None,
    "NEGLAYERS": json.dumps({**LLAMA, "num_hidden_layers": -3}), "ZEROLAYERS": json.dumps({**LLAMA, "num_hidden_layers": 0}),
    "HUGELAYERS": json.dumps({**LLAMA, "num_hidden_layers": 10**7}),
}
BUDGET = str(2**26)
#: (id, argv after ``plan``, exit status, what the error line says)
PLAN = [
    # the issue's: a negative decimal after a space crashed vLLM's parser or blamed the next argument
    ("gpu-util-negative", ["M", "--gpu-memory-utilization", "-0.5", "--device", "h100-80g"], 2,
     "--gpu-memory-utilization -0.5: the fraction of the device's memory vLLM may use, more than 0 and at most 1"),
    ("gpu-util-negative-last", ["M", "--device", "h100-80g", "--gpu-memory-utilization", "-0.5"], 2,
     "--gpu-memory-utilization -0.5: the fraction"),
    ("gpu-util-nan", ["M", "--device", "h100-80g", "--gpu-memory-utilization", "nan"], 2,
     "--gpu-memory-utilization nan: the fraction"),
    ("gpu-util-word", ["M", "--device", "h100-80g", "--gpu-memory-utilization", "most"], 2,
     re.compile(r"argument --gpu-memory-utilization(/--device-memory-utilization)?: (invalid float value: 'most'"
                r"|Value most cannot be converted to <class 'float'>)")),  # vLLM 0.30 - 0.32's parser | 0.33 / 0.34's
    ("memory-negative", ["M", "--device-memory-gib", "-1.5"], 2, "--device-memory-gib -1.5: must be positive"),
    ("overhead-negative", ["M", "--overhead-gib", "-0.5", "--device", "h100-80g"], 2,
     "--overhead-gib -0.5: must be zero or more"),
    ("budget-1e30", ["M", "--kv-cache-memory-bytes", "1e30"], 2,
     "--kv-cache-memory-bytes 1e+30: more bytes than any card holds per worker (the largest plan knows: mi300x, "
     "AMD Instinct MI300X 192GB, 206,136,955,371 bytes)"),
    ("budget-1e30-equals", ["M", "--kv-cache-memory-bytes=1e30"], 2, "more bytes than any card holds per worker"),
    ("budget-300GB", ["M", "--kv-cache-memory-bytes", "300000000000"], 2, "--kv-cache-memory-bytes 3e+11: more bytes"),
    ("budget-3T-suffix", ["M", "--kv-cache-memory-bytes", "3T"], 2, "more bytes than any card holds per worker"),
    ("budget-zero", ["M", "--kv-cache-memory-bytes", "0"], 2, "--kv-cache-memory-bytes 0: must be positive"),
    ("budget-negative", ["M", "--kv-cache-memory-bytes", "-5"], 2, "--kv-cache-memory-bytes -5: must be positive"),
    ("budget-nan", ["M", "--kv-cache-memory-bytes", "nan"], 2, "--kv-cache-memory-bytes nan: must be positive and finite"),
    ("budget-inf", ["M", "--kv-cache-memory-bytes", "inf"], 2, "--kv-cache-memory-bytes inf: must be positive and finite"),
    ("budget-word", ["M", "--kv-cache-memory-bytes", "lots"], 2, "argument --kv-cache-memory-bytes"),
    ("budget-decimal-binary", ["M", "--kv-cache-memory-bytes", "1.5G"], 2, "Decimals are not allowed"),
    ("budget-underscore-1e30", ["M", "--kv_cache_memory_bytes", "1e30"], 2, "more bytes than any card holds"),
    ("budget-too-small", ["M", "--kv-cache-memory-bytes", "64"], 1, ""),  # vLLM's refusal, in its words, on stdout
    ("memory-zero", ["M", "--device-memory-gib", "0"], 2, "--device-memory-gib 0.0: must be positive"),
    ("memory-huge", ["M", "--device-memory-gib", "1e9"], 2,
     "--device-memory-gib 1e+09: more than any accelerator has (at most 1024 GiB; the largest card plan knows: mi300x"),
    ("memory-word", ["M", "--device-memory-gib", "big"], 2, "argument --device-memory-gib: invalid float value: 'big'"),
    ("memory-minus-inf", ["M", "--device-memory-gib", "-inf"], 2, "--device-memory-gib -inf: must be positive and finite"),
    ("overhead-nan", ["M", "--overhead-gib", "nan", "--device", "h100-80g"], 2, "--overhead-gib nan: must be zero or more and finite"),
    ("overhead-huge", ["M", "--overhead-gib", "1e6", "--device", "h100-80g"], 2, "--overhead-gib 1e+06: more than any accelerator has"),
    ("device-unknown", ["M", "--device", "h999"], 2, "argument --device: invalid choice: 'h999'"),
    ("device-empty", ["M", "--device", ""], 2, "argument --device: invalid choice: ''"),
    ("device-missing-value", ["M", "--device"], 2, "argument --device: expected one argument"),
    ("no-budget", ["M"], 2, "give the KV cache budget per worker: --kv-cache-memory-bytes N (exact)"),
    ("no-model", [], 2, "the following arguments are required: MODEL_DIR"),
    ("model-missing", ["/nonexistent/model", "--kv-cache-memory-bytes", BUDGET], 2, "/nonexistent/model: no such directory"),
    ("model-is-config-file", ["M/config.json", "--kv-cache-memory-bytes", BUDGET], 2, "a file; plan takes the model directory"),
    ("model-empty-dir", ["EMPTYDIR", "--kv-cache-memory-bytes", BUDGET], 2, "EMPTYDIR: has no config.json"),
    ("config-empty", ["EMPTYCONFIG", "--kv-cache-memory-bytes", BUDGET], 2, "config.json: not readable as JSON"),
    ("config-not-json", ["BADJSON", "--kv-cache-memory-bytes", BUDGET], 2, "config.json: not readable as JSON"),
    ("config-binary", ["BINARY", "--kv-cache-memory-bytes", BUDGET], 2, "config.json: not readable as JSON"),
    ("config-list", ["LIST", "--kv-cache-memory-bytes", BUDGET], 2, "holds a JSON list, not the object"),
    ("config-string", ["STRING", "--kv-cache-memory-bytes", BUDGET], 2, "holds a JSON str, not the object"),
    ("config-null", ["NULL", "--kv-cache-memory-bytes", BUDGET], 2, "holds a JSON NoneType, not the object"),
    ("config-no-architectures", ["NOARCH", "--kv-cache-memory-bytes", BUDGET], 2, 'has no "architectures"'),
    ("config-architectures-empty", ["NOARCHS", "--kv-cache-memory-bytes", BUDGET], 2, 'has no "architectures"'),
    ("config-architectures-numbers", ["NUMARCH", "--kv-cache-memory-bytes", BUDGET], 2,
     '"architectures" is [1], not a list of class names'),
    ("config-unknown-architecture", ["UNKNOWNARCH", "--kv-cache-memory-bytes", BUDGET], 2,
     "architecture NoSuchForCausalLM is not one this vLLM knows"),
    ("config-remote-code", ["REMOTE", "--kv-cache-memory-bytes", BUDGET], 2, "the model needs remote code"),
    ("json-no-directory", ["M", "--kv-cache-memory-bytes", BUDGET, "--json", "/nonexistent/dir/plan.json"], 2,
     "--json /nonexistent/dir/plan.json: cannot write a file there"),
    ("json-is-directory", ["M", "--kv-cache-memory-bytes", BUDGET, "--json", "TMP"], 2, "cannot write a file there"),
    ("plot-no-directory", ["M", "--kv-cache-memory-bytes", BUDGET, "--plot", "/nonexistent/x.png"], 2,
     "--plot /nonexistent/x.png: cannot write a file there"),
    ("plot-without-sweep", ["M", "--kv-cache-memory-bytes", BUDGET, "--plot", "TMP/x.png"], 2,
     "draws a sweep (give --sweep ARG=V1,V2,... too)"),
    ("stage-budgets-word", ["M", "--stage-budgets", "1,x"], 2, "'1,x': give whole byte counts, one per pipeline stage"),
    ("stage-budgets-zero", ["M", "--stage-budgets", "0,5"], 2, "'0,5': every budget must be positive"),
    ("stage-budgets-huge", ["M", "--stage-budgets", "300000000000,1"], 2, "--stage-budgets 3e+11: more bytes than any card"),
    ("stage-budgets-count", ["M", "--stage-budgets", f"{BUDGET},{BUDGET}"], 2, "2 budgets for 1 pipeline stage"),
    ("tp-zero", ["M", "--kv-cache-memory-bytes", BUDGET, "--tensor-parallel-size", "0"], 2, "vLLM rejects the configuration"),
    ("tp-negative", ["M", "--kv-cache-memory-bytes", BUDGET, "--tensor-parallel-size", "-1"], 2, "vLLM rejects the configuration"),
    ("tp-word", ["M", "--kv-cache-memory-bytes", BUDGET, "-tp", "two"], 2, "invalid int value: 'two'"),
    ("kv-dtype-unknown", ["M", "--kv-cache-dtype", "fp3", "--kv-cache-memory-bytes", BUDGET], 2,
     re.compile(r"argument --kv-cache-dtype: invalid choice: 'fp3'|Invalid kv_cache_dtype: 'fp3'")),  # choices | 0.33+
    ("unknown-option", ["M", "--kv-cache-memory-bytes", BUDGET, "--no-such-option", "1"], 2,
     "unrecognized arguments: --no-such-option 1"),
    ("flag-given-negative", ["M", "--kv-cache-memory-bytes", BUDGET, "--enforce-eager", "-1"], 2,
     "argument --enforce-eager/--no-enforce-eager: ignored explicit argument '-1'"),
    ("max-model-len-beyond", ["M", "--kv-cache-memory-bytes", BUDGET, "--max-model-len", "100000000"], 2,
     "vLLM rejects the configuration"),
    ("gpu-util-above-one", ["M", "--device", "h100-80g", "--gpu-memory-utilization", "1.5"], 2,
     "--gpu-memory-utilization 1.5: the fraction"),
    ("pp-beyond-layers", ["M", "--kv-cache-memory-bytes", BUDGET, "--pipeline-parallel-size", "10"], 2,
     "--pipeline-parallel-size 10: 2 of the 10 stages (0, 9) get none of the model's 8 layers"),
    ("sweep-without-values", ["M", "--kv-cache-memory-bytes", BUDGET, "--sweep", "tensor-parallel-size"], 2, "--sweep"),
    # a new user's review (was: exit 0 with "no layer of this model has a KV cache spec"; minutes of building)
    ("layers-negative", ["NEGLAYERS", "--kv-cache-memory-bytes", BUDGET], 2, "num_hidden_layers is -3; a model has 1 to 10,000"),
    ("layers-zero", ["ZEROLAYERS", "--kv-cache-memory-bytes", BUDGET], 2, "num_hidden_layers is 0; a model has 1 to 10,000"),
    ("layers-ten-million", ["HUGELAYERS", "--kv-cache-memory-bytes", BUDGET], 2,
     "num_hidden_layers is 10,000,000; a model has 1 to 10,000 layers (plan builds each one on the meta device)"),
]


def filler(names: dict[str, str]):
    """argv with each name of ``names`` (an argument's first path component) put as its path."""
    def fill(argv: list[str]) -> list[str]:
        out = []
        for arg in argv:
            head, sep, tail = arg.partition("/")
            out.append(names[head] + sep + tail if head in names else arg)
        return out

    return fill


@pytest.fixture
def place(tmp_path):
    """Names in a case's argv -> paths: model directories (:data:`MODELS`), ``TMP``."""
    names = {"TMP": str(tmp_path)}
    for name, config in MODELS.items():
        directory = tmp_path / name
        directory.mkdir()
        if name == "BINARY":
            (directory / "config.json").write_bytes(b"\xff\xfe\x00bad")
        elif config is not None:
            (directory / "config.json").write_text(config)
        names[name] = str(directory)

    return filler(names)


def ran(capsys, call) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of ``call()``; argparse's own exit is its status."""
    try:
        code = call()
    except SystemExit as exc:
        code = exc.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_one_line(code, out, err, expected_code, fragment, stdout_empty=True):
    """The exit status, no traceback, and for bad input one error line holding ``fragment`` (text,
    or a pattern where vLLM's releases word it differently)."""
    assert code == expected_code, (out, err)
    assert "Traceback" not in err + out, err
    errors = [line for line in err.splitlines() if "error:" in line]
    if expected_code == 2:
        found = fragment.search(errors[0]) if errors and isinstance(fragment, re.Pattern) else errors and fragment in errors[0]
        assert len(errors) == 1 and found and err.splitlines()[-1] == errors[0], err
        assert out == "" or not stdout_empty, out


@pytest.mark.parametrize(("case", "argv", "code", "fragment"), PLAN, ids=[c[0] for c in PLAN])
def test_plan_bad_input(place, capsys, case, argv, code, fragment):
    got, out, err = ran(capsys, lambda: cli.run(place(argv)))
    assert_one_line(got, out, err, code, fragment)
    if code == 1:  # vLLM's refusal in its own words, the plan's table on stdout
        assert "num_blocks" in out or "refuses" in out, out


@pytest.fixture(scope="module")
def plan_file(reports, tmp_path_factory):  # noqa: F811
    """A real plan file (``plan --json``) of the tiny Llama, whose directory is named ``model``."""
    root = tmp_path_factory.mktemp("plan")
    (root / "model").mkdir()
    (root / "model" / "config.json").write_text(json.dumps(LLAMA))
    assert cli.run([str(root / "model"), "--kv-cache-memory-bytes", BUDGET, "--json", str(root / "plan.json")]) == 0
    return root / "plan.json"


#: (id, argv after ``report``, what the error line says); every one exit 2.
REPORT = [
    ("missing-file", ["TMP/missing.json"], "missing.json: cannot read it (No such file or directory)"),
    ("empty-file", ["EMPTY"], "an empty file, not a KV cache report"),
    ("dev-null", ["/dev/null"], "/dev/null: an empty file, not a KV cache report"),
    ("not-json", ["NOTJSON"], "not a KV cache report (not JSON"),
    ("not-utf8", ["BINARY"], "not a KV cache report (not UTF-8 text)"),
    ("json-list", ["LIST"], "LIST"),
    ("json-object-empty", ["OBJECT"], "OBJECT"),
    ("json-string", ["STRING"], "STRING"),
    ("empty-directory", ["TMP"], "no KV cache report in this directory"),
    ("file-named-for-another-rank", ["RANK1"], "the file name says rank 1, the report rank 0"),
    ("trailing-slash-on-file", ["stock/"], "cannot read it"),
    ("plan-and-run-of-two-models", ["PLAN", "stock"], "refusing to compare two different models"),
    ("two-models", ["stock", "other_model"], "refusing to compare two different models"),
    ("plan-second", ["stock", "PLAN"], "a plan file, given second"),
    ("two-plans", ["PLAN", "PLAN"], "a plan file too, not a run's report"),
    ("plan-alone", ["PLAN"], "a plan file (plan --json)"),
    ("broken-plan", ["BROKENPLAN", "stock"], "not a readable plan file"),
    ("two-ranks-on-a-side", ["deploy", "stock"], "holds reports of 2 ranks; name one rank's report file on each side"),
    ("budget-without-plot", ["stock", "--budget", "100"], "--budget 100: a positive number of bytes, with --plot"),
    ("budget-negative", ["stock", "--budget", "-5", "--plot", "TMP/m.png"], "--budget -5: a positive number of bytes"),
    ("budget-word", ["stock", "--budget", "lots"], "argument --budget: invalid int value: 'lots'"),
    ("json-no-directory", ["stock", "--json", "/nonexistent/dir/r.json"], "--json /nonexistent/dir/r.json: cannot write"),
    ("json-is-directory", ["stock", "--json", "TMP"], "cannot write a file there"),
    ("three-paths", ["stock", "stock", "stock"], "3 paths given"),
    ("no-path", [], "the following arguments are required: PATH"),
    ("unknown-option", ["stock", "--no-such-option"], "unrecognized arguments: --no-such-option"),
]


@pytest.fixture
def report_place(reports, plan_file, tmp_path):  # noqa: F811
    names = {"TMP": str(tmp_path), "PLAN": str(plan_file), **{k: str(v) for k, v in reports.items()}}
    files = {"EMPTY": "", "NOTJSON": "{not json", "LIST": "[1, 2]", "OBJECT": "{}", "STRING": '"report"',
             "BROKENPLAN": json.dumps({"kind": "plan", "plan_version": 1})}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
        names[name] = str(tmp_path / name)
    (tmp_path / "BINARY").write_bytes(b"\xff\xfe\x00")
    names["BINARY"] = str(tmp_path / "BINARY")
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    shutil.copy(reports["stock"], ranks / "kv_cache_report.latest.rank1.json")  # a rank 0 report
    names["RANK1"] = str(ranks / "kv_cache_report.latest.rank1.json")
    empty = tmp_path / "empty"
    empty.mkdir()
    names["TMP"] = str(empty)

    return filler(names)


@pytest.mark.parametrize(("case", "argv", "fragment"), REPORT, ids=[c[0] for c in REPORT])
def test_report_bad_input(report_place, capsys, case, argv, fragment):
    code, out, err = ran(capsys, lambda: main(["report", *report_place(argv)]))
    assert_one_line(code, out, err, 2, fragment.replace("LIST", "").replace("OBJECT", "").replace("STRING", ""))


#: (id, environment, argv, exit status, what the error line says)
OTHERS = [
    ("doctor-missing-model", {}, ["doctor", "--", "--model", "/nonexistent/model"], 2,
     "doctor: error: --model /nonexistent/model: no such directory"),
    ("doctor-missing-model-equals", {}, ["doctor", "--", "--model=./no/such/model"], 2, "--model ./no/such/model: no such"),
    ("doctor-unknown-engine-option", {}, ["doctor", "--", "--no-such-option"], 2,
     "vLLM refuses the engine options given (ValueError: unrecognized arguments: --no-such-option)"),
    ("doctor-engine-option-word", {}, ["doctor", "--", "--tensor-parallel-size", "two"], 2,
     "vLLM refuses the engine options given (ValueError: argument --tensor-parallel-size/-tp: invalid int value: 'two')"),
    ("doctor-json-no-directory", {}, ["doctor", "--json", "/nonexistent/dir/d.json"], 2, "cannot write a file there"),
    ("doctor-switch-bogus", {"KV_STRATEGIES": "bogus"}, ["doctor"], 1,
     "KV_STRATEGIES='bogus' is not valid; use one of 'auto', 'on', 'off', 'observe'. vLLM would stop at start-up."),
    ("doctor-switch-typo", {"KV_STRATEGIES": "observed"}, ["doctor"], 1, "KV_STRATEGIES='observed' is not valid"),
    ("doctor-fault-bogus", {"KV_STRATEGIES_TEST_FAULT": "everything"}, ["doctor"], 1,
     "KV_STRATEGIES_TEST_FAULT='everything' is not valid"),
    ("doctor-switch-off", {"KV_STRATEGIES": "off"}, ["doctor"], 1, ""),
    ("matrix-json-no-directory", {}, ["matrix", "--json", "/nonexistent/dir/m.json"], 2, "cannot write a file there"),
    ("matrix-unknown-option", {}, ["matrix", "--all"], 2, "unrecognized arguments: --all"),
    ("strategies-json-no-directory", {}, ["strategies", "--json", "/nonexistent/s.json"], 2, "cannot write a file there"),
    ("strategies-extra-argument", {}, ["strategies", "all"], 2, "unrecognized arguments: all"),
    ("unknown-command", {}, ["serve"], 2, "argument command: invalid choice: 'serve'"),
    ("no-command", {}, [], 2, "the following arguments are required: command"),
]


@pytest.mark.parametrize(("case", "env", "argv", "code", "fragment"), OTHERS, ids=[c[0] for c in OTHERS])
def test_other_bad_input(monkeypatch, capsys, case, env, argv, code, fragment):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    got, out, err = ran(capsys, lambda: main(argv))
    assert_one_line(got, out, err, code, fragment, stdout_empty=False)
    if code == 2:
        assert out == ""
    else:  # doctor: the facts on stdout, its verdict last (not active), or the error that stops vLLM
        assert fragment in out, out


def test_cheap_checks_come_before_vllm_s_import():
    """The issue's inputs that need no vLLM are answered in a fresh interpreter without importing it."""
    import subprocess
    import sys

    code = ("import sys\nfrom vllm_kv_strategies.deploy import cli\n"
            "for argv in (['/nonexistent/m', '--gpu-memory-utilization', '-0.5'], ['.', '--device-memory-gib', '-1.5'],"
            " ['.', '--overhead-gib', '-0.5', '--device', 'h100-80g'], ['.', '--kv-cache-memory-bytes', '1e30'],"
            " ['--device', 'list']):\n"
            "    print(cli.run(argv))\nprint('vllm' in sys.modules)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    answers = [line for line in proc.stdout.splitlines() if line in ("0", "2", "True", "False")]  # not the card list
    assert answers == ["2", "2", "2", "2", "0", "False"], proc.stdout + proc.stderr
    assert proc.stderr.splitlines() == [
        "plan: error: --gpu-memory-utilization -0.5: the fraction of the device's memory vLLM may use, more than 0 "
        "and at most 1",
        "plan: error: --device-memory-gib -1.5: must be positive",
        "plan: error: --overhead-gib -0.5: must be zero or more",
        "plan: error: --kv-cache-memory-bytes 1e+30: more bytes than any card holds per worker (the largest plan knows: "
        "mi300x, AMD Instinct MI300X 192GB, 206,136,955,371 bytes); a larger card: give its memory too "
        "(--device-memory-gib GIB)"]


def test_a_plan_and_a_run_of_one_model_under_other_names_are_compared(plan_file, reports):  # noqa: F811
    """The plan of a directory named ``model`` against a run whose report names the model otherwise (a
    model served from another path, or by its repo id): the same KV cache layers make it the same model,
    so report compares them; a report of other layers under another name is refused (new-user review:
    ``configs/llama-3-70b`` against ``meta-llama/Meta-Llama-3-70B`` was refused)."""
    from vllm_kv_strategies.report import plan_file as plans
    from vllm_kv_strategies.report.schema import ReportError

    plan = plans.load(str(plan_file))
    layers = {name for group in plan["ranks"][0]["groups"] for name in group["layers"]}
    report = {"model": "someone/Another-Name", "totals": {"rank": 0}, "layers": {name: {} for name in layers}}
    plans.check_same_model(plan, "PLAN", report, "RUN")  # same layers: compared
    report["layers"] = {name: {} for name in sorted(layers)[:-1]}
    with pytest.raises(ReportError, match="refusing to compare two different models"):
        plans.check_same_model(plan, "PLAN", report, "RUN")
    report["model"] = "/elsewhere/MODEL"  # the directory's name, case aside: the same model
    plans.check_same_model(plan, "PLAN", report, "RUN")


def test_device_list_as_json(capsys, tmp_path):
    """``plan --device list --json -``: the cards as JSON alone on stdout (was the text table, exit 0); into
    a file with ``--json OUT``; an unwritable OUT is one line, exit 2. No vLLM needed."""
    from vllm_kv_strategies.deploy.budget import DEVICES

    assert cli.run(["--device", "list", "--json", "-"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["kind"] == "devices" and {d["name"] for d in data["devices"]} == set(DEVICES)
    h100 = next(d for d in data["devices"] if d["name"] == "h100-80g")
    assert (h100["bytes"], h100["platform"]) == (DEVICES["h100-80g"].bytes, "cuda")
    assert cli.run(["--device", "list", "--json", str(tmp_path / "cards.json")]) == 0
    assert json.loads((tmp_path / "cards.json").read_text()) == data
    got, out, err = ran(capsys, lambda: cli.run(["--device", "list", "--json", "/nonexistent/dir/c.json"]))
    assert_one_line(got, out, err, 2, "--json /nonexistent/dir/c.json: cannot write")
