"""Public startup logs, read for plan's budget estimate (tests/deploy/startup_logs/*.toml).

Each file is one log: its source, the card, the engine arguments it states, the lines it
printed (quoted exactly under ``[quotes]``) and the numbers read from them (``[logged]``); the
model's published ``config.json`` is in tests/deploy/configs/<config>/. A log whose own numbers
contradict each other carries ``set_aside = "why"`` and is listed, not estimated.

vLLM prints the weights as "Model loading took X GiB" (older releases: "Loading model weights
took X GB", also bytes / 2**30) and the budget as "Available KV cache memory: X GiB", both with
two (or four) decimals of GiB.
"""

from __future__ import annotations

import dataclasses
import json
import re
import statistics
import tomllib
from pathlib import Path

from vllm_kv_strategies.deploy import hccl, overhead
from vllm_kv_strategies.deploy.budget import DEFAULT_OVERHEAD_GIB, DEVICES, GIB

HERE = Path(__file__).resolve().parent
LOGS = HERE / "startup_logs"
CONFIGS = HERE / "configs"

#: The release taken for a log that states none (its lines are of the newest format).
NEWEST = "0.34"

#: Card names as logs state them -> plan's --device names (the first pattern found in the card text wins).
CARDS = [
    (r"H100.*NVL|NVL.*H100", "h100-nvl"), (r"H100", "h100-80g"), (r"H200", "h200"), (r"H20\b", "h20"),
    (r"B200", "b200"), (r"A100.*40|40.*A100", "a100-40g"), (r"A100", "a100-80g"), (r"L40S", "l40s"),
    (r"\bL20\b", "l20"), (r"A10G?\b", "a10"), (r"4090", "rtx4090"), (r"MI300X", "mi300x"),
    (r"A3\b|910C|910_93", "a3"), (r"910B4|32 ?GB", "910b-32g"), (r"910B|A2\b|Atlas 800", "910b-64g"),
]


def gib_bytes(text: str) -> int:
    """Bytes of a logged size ("14.99 GiB", "57.7520 GB": vLLM's GB is also bytes / 2**30)."""
    match = re.fullmatch(r"\s*(-?[0-9.]+)\s*(GiB|GB)\s*", text)
    if not match:
        raise ValueError(f"not a logged size in GiB: {text!r}")
    return round(float(match.group(1)) * GIB)


def device(data: dict) -> str | None:
    """plan's ``--device`` name for the log's card, or None."""
    return next((name for pattern, name in CARDS if re.search(pattern, data["card"])), None)


def card_bytes(data: dict) -> tuple[int, str]:
    """(total bytes the runtime reports, where from): the log's own figure, else plan's card.

    Raises:
        KeyError: neither is known (names the card)."""
    if "card_total_gib" in data:
        return round(data["card_total_gib"] * GIB), "the log's total"
    if (name := device(data)) is None:
        raise KeyError(f"no known card in {data['card']!r}")
    return DEVICES[name].bytes, f"--device {name}"


@dataclasses.dataclass
class Log:
    name: str
    data: dict
    config: dict
    #: the weights term when not the logged one (:meth:`plan_weights`), and where it comes from
    planned_weights: int | None = None
    weights_source: str = "the log's Model loading took"

    @property
    def set_aside(self) -> str | None:
        return self.data.get("set_aside")

    @property
    def logged(self) -> int:
        return gib_bytes(self.data["logged"]["available_kv"])

    @property
    def weights(self) -> int:
        return self.planned_weights if self.planned_weights is not None else gib_bytes(self.data["logged"]["weights"])

    def plan_weights(self) -> None:
        """Take the weights term from ``plan --json`` (the installed vLLM) for the log's model and
        parallel sizes; keep the logged one, saying why, where plan cannot build the model."""
        import contextlib
        import io
        import tempfile

        from vllm_kv_strategies.deploy import cli

        e = self.data.get("engine", {})
        with tempfile.TemporaryDirectory() as tmp:
            model = Path(tmp) / self.data["config"]
            model.mkdir()
            (model / "config.json").write_text((CONFIGS / self.data["config"] / "config.json").read_text())
            out = Path(tmp) / "plan.json"
            card = device(self.data)
            argv = [str(model), *(["--device", card] if card else []),
                    "--device-memory-gib", str(card_bytes(self.data)[0] / GIB), "--overhead-gib", "0",
                    "--max-model-len", str(e.get("max_model_len", 4096)), "--json", str(out),
                    "--tensor-parallel-size", str(e.get("tensor_parallel_size", 1)),
                    "--pipeline-parallel-size", str(e.get("pipeline_parallel_size", 1))]
            if e.get("quantization") and e["quantization"] not in ("ascend",):
                argv += ["--quantization", e["quantization"]]
            err = io.StringIO()
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
                code = cli.run(argv)
            if code != 0 or not out.is_file():
                self.weights_source = f"logged (plan exits {code}: {err.getvalue().strip().splitlines()[-1:]})"
                return
            terms = {t["name"]: t for t in json.loads(out.read_text())["budget"]["terms"]}
            self.planned_weights, self.weights_source = terms["weights"]["value"], "plan: " + terms["weights"]["source"]

    @property
    def utilisation(self) -> float:
        value = self.data.get("engine", {}).get("gpu_memory_utilization", "default")
        return 0.9 if value == "default" else float(value)

    def engine(self) -> overhead.Engine:
        """The log's engine (the rank that logs, rank 0: with pipeline parallel > 1, a stage that
        does not sample): what it states, else ``vllm serve``'s defaults of its release for
        its card (``EngineArgs.get_batch_defaults``: 8,192 tokens and 1,024 sequences on a card
        of 70 GiB or more other than an A100 (16,384 from 160 GiB), else 2,048 and 256). Its vLLM
        release: the one it states, else vllm-ascend's (each pairs with the vLLM of its number),
        else (a log that masks it) the newest."""
        e, total = self.data.get("engine", {}), card_bytes(self.data)[0]
        big = total >= 70 * GIB and "A100" not in self.data["card"]
        tokens = e.get("max_num_batched_tokens") or (16384 if total >= 160 * GIB else 8192 if big else 2048)
        seqs = e.get("max_num_seqs") or (1024 if big else 256)
        platform = self.data["platform"]
        release = re.search(r"vllm(?:-ascend)? (\d+\.\d+)", self.data["release"].lower())
        graphs = largest = 0
        if not e.get("enforce_eager") and platform in ("cuda", "rocm"):
            sizes = overhead.capture_sizes(seqs, tokens, e.get("cudagraph_capture_sizes_max", 512))
            layers = -(-overhead.Shape.from_config(self.config).layers // e.get("pipeline_parallel_size", 1))
            graphs, largest = overhead.graph_count(sizes, layers, seqs), max(sizes)
        return overhead.Engine(platform, release.group(1) if release else NEWEST, e.get("tensor_parallel_size", 1),
                               e.get("pipeline_parallel_size", 1), tokens, seqs, graphs, largest,
                               samples=e.get("pipeline_parallel_size", 1) == 1,
                               expert_parallel=bool(e.get("enable_expert_parallel")), dp=e.get("data_parallel_size", 1),
                               hccl_buffsize=e.get("hccl_buffsize", hccl.HCCL_DEFAULT_BUFFSIZE), soc=self.ascend_family)

    @property
    def ascend_family(self) -> str:
        """vllm-ascend's device family of the log's card (``hccl.SOC_FAMILY``'s names): ``A3`` (910C), ``310P``, else ``A2`` (910B)."""
        card = self.data["card"]
        return "A3" if "A3" in card or "910C" in card else "310P" if "310P" in card or "300I" in card else "A2"

    def estimates(self) -> tuple[int, int]:
        """(today's constant's estimate, the computed terms' estimate), bytes: device memory x
        utilisation - the logged weights - the overhead."""
        requested = card_bytes(self.data)[0] * self.utilisation
        computed = sum(v for _, v, _ in overhead.terms(overhead.Shape.from_config(self.config), self.engine()))
        return (round(requested - self.weights - DEFAULT_OVERHEAD_GIB * GIB), round(requested - self.weights - computed))


def full_config(name: str) -> dict:
    """tests/deploy/configs/<name>/config.json with the defaults a published file leaves out (Gemma 3's
    vocabulary, ...) filled in by transformers' config class for its ``model_type``, as vLLM reads it
    (the file as published where that class refuses one of its values)."""
    from transformers import AutoConfig

    config = json.loads((CONFIGS / name / "config.json").read_text())
    try:
        return AutoConfig.for_model(**config).to_dict()
    except Exception:  # transformers' strict fields refuse a published value (Llama 4's): as published
        return config


def load() -> list[Log]:
    """Every log; its config read unless it is set aside (FileNotFoundError names a log whose config is missing)."""
    out = []
    for path in sorted(LOGS.glob("*.toml")):
        data = tomllib.loads(path.read_text())
        if data.get("set_aside"):
            out.append(Log(path.stem, data, {}))
            continue
        if not (CONFIGS / data["config"] / "config.json").is_file():
            raise FileNotFoundError(f"{path.name}: no tests/deploy/configs/{data['config']}/config.json")
        out.append(Log(path.stem, data, full_config(data["config"])))
    return out


def within(error: int, logged: int) -> bool:
    """The issue's bound for one log: 10 % of the logged budget, or 0.5 GiB where it is under 5 GiB."""
    return abs(error) <= (GIB // 2 if logged < 5 * GIB else 0.10 * logged)


def summary(logs: list[Log]) -> dict:
    rel = [abs(log.estimates()[1] - log.logged) / log.logged for log in logs if not log.set_aside]
    return {"logs": len(rel), "median": statistics.median(rel), "worst": max(rel)}
