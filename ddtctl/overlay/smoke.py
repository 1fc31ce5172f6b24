#!/usr/bin/env python3
"""Smoke checks of a DDTREE payload, run by the target SGLang interpreter (standard library + sglang + torch
only; deploy ships it beside the payload).

    python smoke.py [--view DIR] [--checks plugin,registered,...] [--model DIR --draft DIR]

--view puts a payload view (see installer.py view) first on sys.path; without it the checks run against the
payload installed in the interpreter's site-packages. Prints one JSON object:
    {"ok": bool, "checks": [{"id", "ok", "detail"}], "versions": {...}}
No GPU is needed: the resolve checks declare an H200 (SM90) platform the way ddtctl's dry-run does.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback

ALL_CHECKS = ("plugin", "registered", "family", "flags", "resolve", "rules", "launch_refused", "kernels")
# also available: resolve_basic (for integrations that do not declare DDTREE's resolved values)
DDTREE_FLAGS = {
    # dest: (option, type, default)
    "speculative_ddtree_budget": ("--speculative-ddtree-budget", int, None),
    "speculative_ddtree_topk_cap": ("--speculative-ddtree-topk-cap", int, None),
    "speculative_ddtree_shadow_linear": ("--speculative-ddtree-shadow-linear", bool, False),
    "speculative_ddtree_allow_hybrid_unsafe": ("--speculative-ddtree-allow-hybrid-unsafe", bool, False),
    "speculative_ddtree_budget_schedule": ("--speculative-ddtree-budget-schedule", str, None),
}

TARGET_CONFIG = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 1024,
    "intermediate_size": 3072,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "num_hidden_layers": 8,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000,
    "torch_dtype": "bfloat16",
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "attention_bias": False,
}
DRAFT_CONFIG = dict(
    TARGET_CONFIG,
    architectures=["DFlashDraftModel"],
    num_hidden_layers=2,
    block_size=16,
    dflash_config={"mask_token_id": 151669, "target_layer_ids": [1, 3, 5]},
    num_target_layers=8,
)


class Failed(Exception):
    pass


def _prepare_torch() -> None:
    import torch

    # PyPI's torchvision is a CUDA build; beside a CPU torch its import needs these op schemas declared first.
    for qualname, schema in (
        ("torchvision::nms", "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor"),
        ("torchvision::qnms", "(Tensor qdets, Tensor scores, float iou_threshold) -> Tensor"),
    ):
        try:
            torch.library.define(qualname, schema)
        except Exception:
            pass


class Platform:
    """Declare an SM90 CUDA machine for resolution (no GPU here), restored on exit."""

    def __enter__(self):
        import torch
        from sglang.srt import runtime_context as rc

        self._cap = torch.cuda.get_device_capability
        torch.cuda.get_device_capability = lambda device=None: (9, 0)
        facts = dict(
            is_cuda=True,
            is_hip=False,
            is_npu=False,
            is_xpu=False,
            is_musa=False,
            is_mps=False,
            device_sm=90,
            device_capability=(9, 0),
            is_sm90=True,
            is_sm100=False,
            is_blackwell=False,
        )
        known = set(getattr(rc, "_PLATFORM_PROBES", {})) | set(getattr(rc, "_PLATFORM_VALUES", {}))
        self._override = rc.override_platform(**{k: v for k, v in facts.items() if k in known})
        self._override.install()
        return self

    def __exit__(self, *exc):
        import torch

        torch.cuda.get_device_capability = self._cap
        try:
            self._override.restore()
        except Exception:
            pass
        return False


def _models(args) -> tuple[str, str]:
    if args.model and args.draft:
        return args.model, args.draft
    root = tempfile.mkdtemp(prefix="ddtree-smoke-")
    for name, cfg in (("target", TARGET_CONFIG), ("draft", DRAFT_CONFIG)):
        os.makedirs(os.path.join(root, name))
        with open(os.path.join(root, name, "config.json"), "w") as f:
            json.dump(cfg, f)
    return os.path.join(root, "target"), os.path.join(root, "draft")


def _argv(model: str, draft: str, *extra: str) -> list[str]:
    return [
        "--model-path",
        model,
        "--speculative-algorithm",
        "DDTREE",
        "--speculative-draft-model-path",
        draft,
        "--speculative-dflash-block-size",
        "16",
        "--device",
        "cuda",
        "--tp-size",
        "1",
        *extra,
    ]


def _resolve(argv: list[str]):
    from sglang.srt.arg_groups.overrides import resolution_result
    from sglang.srt.server_args import prepare_server_args

    with Platform():
        sa = prepare_server_args(argv)
        sa.resolve_once()
    return sa, (lambda field: resolution_result(sa, field))


# ----------------------------------------------------------------------------------------------------- checks
def check_plugin(ctx) -> str:
    from importlib.metadata import entry_points

    from sglang.srt.plugins import load_plugins

    eps = [ep for ep in entry_points(group="sglang.srt.plugins") if ep.name == "ddtree"]
    if not eps:
        raise Failed("no `ddtree` entry point in group sglang.srt.plugins on sys.path")
    allowed = os.environ.get("SGLANG_PLUGINS")
    if allowed and "ddtree" not in [x.strip() for x in allowed.split(",")]:
        raise Failed(f"SGLANG_PLUGINS={allowed!r} excludes the ddtree plugin")
    load_plugins()  # already run at start-up; idempotent
    return f"{eps[0].value} (dist {eps[0].dist.name if eps[0].dist else '?'})"


def check_registered(ctx) -> str:
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    algo = SpeculativeAlgorithm.from_string("DDTREE")
    if getattr(algo, "name", None) != "DDTREE":
        raise Failed(f"from_string('DDTREE') returned {algo!r}")
    if SpeculativeAlgorithm.from_string("ddtree") is not algo:
        raise Failed("from_string('ddtree') does not return the same algorithm")
    ctx["algo"] = algo
    return f"{type(algo).__module__}.{type(algo).__name__}"


def check_family(ctx) -> str:
    algo = ctx.get("algo")
    if algo is None:
        raise Failed("DDTREE is not registered")
    got = {
        m: getattr(algo, m)()
        for m in (
            "is_dflash_family",
            "is_dflash",
            "is_eagle",
            "is_speculative",
            "supports_target_verify_for_draft",
        )
    }
    want = {
        "is_dflash_family": True,
        "is_dflash": False,
        "is_eagle": False,
        "is_speculative": True,
        "supports_target_verify_for_draft": True,
    }
    if got != want:
        raise Failed(f"predicates {got}, expected {want}")
    return "is_dflash_family() and not is_dflash()"


def check_flags(ctx) -> str:
    import argparse as ap

    from sglang.srt.server_args import ServerArgs

    parser = ap.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    actions = {a.dest: a for a in parser._actions}
    for dest, (opt, typ, default) in DDTREE_FLAGS.items():
        a = actions.get(dest)
        if a is None or opt not in a.option_strings:
            raise Failed(f"{opt} is not an argument")
        if a.default != default:
            raise Failed(f"{opt} defaults to {a.default!r}, expected {default!r}")
        if typ is bool and a.nargs != 0:
            raise Failed(f"{opt} should be a switch (store_true)")
        if typ is int and a.type is not int:
            raise Failed(f"{opt} should parse as int, parses with {a.type!r}")
    if "--speculative-ddtree-verify-width" in parser._option_string_actions:
        raise Failed("the resolved verify width must not be a command-line flag")
    ns = parser.parse_args(
        [
            "--model-path",
            "m",
            "--speculative-ddtree-budget",
            "64",
            "--speculative-ddtree-topk-cap",
            "8",
            "--speculative-ddtree-shadow-linear",
            "--speculative-ddtree-allow-hybrid-unsafe",
            "--speculative-ddtree-budget-schedule",
            "2:64,0",
        ]
    )
    got = {d: getattr(ns, d) for d in DDTREE_FLAGS}
    want = {
        "speculative_ddtree_budget": 64,
        "speculative_ddtree_topk_cap": 8,
        "speculative_ddtree_shadow_linear": True,
        "speculative_ddtree_allow_hybrid_unsafe": True,
        "speculative_ddtree_budget_schedule": "2:64,0",
    }
    if got != want:
        raise Failed(f"parsed {got}, expected {want}")
    return ", ".join(opt for opt, _, _ in DDTREE_FLAGS.values())


def check_resolve(ctx) -> str:
    model, draft = ctx["models"]
    _, get = _resolve(
        _argv(
            model,
            draft,
            "--disable-overlap-schedule",
            "--speculative-ddtree-budget",
            "32",
            "--speculative-ddtree-topk-cap",
            "8",
        )
    )
    got = {
        f: get(f)
        for f in (
            "speculative_algorithm",
            "speculative_num_draft_tokens",
            "speculative_num_steps",
            "speculative_eagle_topk",
            "speculative_ddtree_budget",
            "speculative_ddtree_topk_cap",
            "speculative_ddtree_verify_width",
        )
    }
    want = {
        "speculative_algorithm": "DDTREE",
        "speculative_num_draft_tokens": 16,
        "speculative_num_steps": 1,
        "speculative_eagle_topk": 1,
        "speculative_ddtree_budget": 32,
        "speculative_ddtree_topk_cap": 8,
        "speculative_ddtree_verify_width": 33,
    }
    if got != want:
        raise Failed(f"resolved {got}, expected {want}")
    return "DDTREE, 16 draft tokens, budget 32, topk cap 8, verify width 33"


def check_resolve_basic(ctx) -> str:
    """Any DDTREE integration (e.g. an imported, hand-patched one): a
    DDTREE argv is accepted and stays DDTREE."""
    model, draft = ctx["models"]
    _, get = _resolve(_argv(model, draft, "--disable-overlap-schedule"))
    if str(get("speculative_algorithm")).upper() != "DDTREE":
        raise Failed(f"resolved speculative_algorithm is {get('speculative_algorithm')!r}, not DDTREE")
    return f"DDTREE, {get('speculative_num_draft_tokens')} draft tokens"


def check_rules(ctx) -> str:
    """DDTREE's rules inside resolution: an error is raised with its rule id and fix (DDT104, budget 0), an
    override is declared (DDT115: no attention backend given -> triton), and the overlap scheduler stays on
    (DDTREE runs under it, as DFLASH does)."""
    model, draft = ctx["models"]
    try:
        _resolve(_argv(model, draft, "--speculative-ddtree-budget", "0"))
    except ValueError as exc:
        if "DDT104" not in str(exc) or "fix:" not in str(exc):
            raise Failed(f"rejected, but not by rule DDT104 with a fix: {exc}") from None
    else:
        raise Failed("a DDTREE argv with --speculative-ddtree-budget 0 was accepted")
    _, get = _resolve(_argv(model, draft))
    if get("attention_backend") != "triton":
        raise Failed(
            f"without an attention backend DDTREE resolved attention_backend={get('attention_backend')!r}, "
            "expected the DDT115 override to 'triton'"
        )
    if get("disable_overlap_schedule") is not False:
        raise Failed(
            f"DDTREE resolved disable_overlap_schedule={get('disable_overlap_schedule')!r}: the overlap "
            "scheduler was switched off"
        )
    return (
        "budget 0 rejected by [DDT104] with its fix; no attention backend: triton (DDT115); "
        "overlap scheduler on"
    )


def check_launch_refused(ctx) -> str:
    """With the worker switched off (DDTREE_WORKER=0), Engine._launch_subprocesses (every server start goes
    through it) must refuse DDTREE before spawning: the off switch never downgrades to another algorithm."""
    import os

    saved = os.environ.get("DDTREE_WORKER")
    os.environ["DDTREE_WORKER"] = "0"
    try:
        return _launch_refused_when_off(ctx)
    finally:
        if saved is None:
            os.environ.pop("DDTREE_WORKER", None)
        else:
            os.environ["DDTREE_WORKER"] = saved


def _launch_refused_when_off(ctx) -> str:
    model, draft = ctx["models"]
    from sglang.srt.server_args import prepare_server_args

    sa = prepare_server_args(_argv(model, draft, "--disable-overlap-schedule"))
    try:
        from sglang.srt.entrypoints.engine import Engine

        launch = lambda: Engine._launch_subprocesses(sa, None, None, None)  # noqa: E731 - one name, two paths
        how = "Engine._launch_subprocesses"
    except (
        ImportError
    ) as exc:  # this environment cannot start servers at all (e.g. no uvloop): check the gate
        from ddtree_sglang.plugin import _launch_gate

        launch = lambda: _launch_gate(None, sa)  # noqa: E731
        how = f"the launch gate (the engine is not importable here: {exc})"
    try:
        with Platform():
            launch()
    except Exception as exc:  # the gate raises before anything is spawned
        if "DDTREE" not in str(exc) or "worker" not in str(exc):
            raise Failed(
                f"launch failed, but not with the DDTREE refusal: {type(exc).__name__}: {exc}"
            ) from None
        algo = ctx.get("algo")
        if algo is not None:
            try:
                algo.create_worker(sa)
            except Exception as exc2:
                if "DDTREE" not in str(exc2):
                    raise Failed(f"create_worker raised an unclear error: {exc2}") from None
            else:
                raise Failed("create_worker returned a worker class")
        return f"{how}: {type(exc).__name__}: {str(exc)[:100]}"
    raise Failed(f"{how} did not refuse a DDTREE server")


def check_kernels(ctx) -> str:
    """The payload's DDTree kernels self-test on CPU, under Triton's interpreter (set
    before triton is imported, so it runs in a fresh interpreter rather than this one,
    where sglang already imported triton)."""
    try:
        import importlib.util

        found = importlib.util.find_spec("ddtree_sglang.kernels") is not None
    except ImportError:
        found = False
    if not found:
        return "skipped: this payload ships no kernels"
    if os.environ.get("TRITON_INTERPRET") != "1":
        import subprocess

        cmd = [sys.executable, os.path.abspath(__file__), "--checks", "kernels"]
        if ctx.get("view"):
            cmd += ["--view", ctx["view"]]
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=900, env=dict(os.environ, TRITON_INTERPRET="1")
        )
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        if not lines:
            raise Failed(
                f"kernels self-test process failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}"
            )
        entry = json.loads(lines[-1])["checks"][0]
        if not entry["ok"]:
            raise Failed(entry["detail"])
        return entry["detail"]
    import ddtree_sglang.kernels as kernels

    result = kernels.selftest("cpu")
    checks = list(getattr(result, "checks", []) or [])
    if not getattr(result, "ok", False):
        bad = [c for c in checks if not getattr(c, "ok", False)]
        first = bad[0] if bad else result
        raise Failed(
            f"selftest('cpu') failed ({len(bad)}/{len(checks)} checks): "
            f"{getattr(first, 'name', '')}: {getattr(first, 'detail', first)}"
        )
    return f"selftest('cpu') ok, {len(checks)} checks (Triton interpreter)"


CHECKS = {
    "plugin": check_plugin,
    "registered": check_registered,
    "family": check_family,
    "flags": check_flags,
    "resolve": check_resolve,
    "resolve_basic": check_resolve_basic,
    "rules": check_rules,
    "launch_refused": check_launch_refused,
    "kernels": check_kernels,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="smoke.py")
    parser.add_argument("--view", help="a payload view directory to put first on sys.path")
    parser.add_argument("--checks", default=",".join(ALL_CHECKS))
    parser.add_argument("--model", help="target model dir with config.json (default: a small generated one)")
    parser.add_argument("--draft", help="DFlash draft model dir with config.json")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    if args.view:
        sys.path.insert(0, os.path.abspath(args.view))
        ctx_view = os.path.abspath(args.view)
    else:
        ctx_view = None
    # Keep the protocol line clean: everything else sglang prints goes to stderr.
    proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    out: dict = {"ok": True, "checks": []}
    ctx: dict = {"view": ctx_view}
    try:
        _prepare_torch()
        import sglang

        out["versions"] = {
            "python": sys.version.split()[0],
            "sglang": getattr(sglang, "__version__", None),
            "sglang_file": sglang.__file__,
        }
        # What SGLang's launcher does before anything else (launch_server.py): run the general plugins.
        from sglang.srt.plugins import load_plugins

        load_plugins()
        ctx["models"] = _models(args)
    except Exception as exc:
        out.update(ok=False, error=f"{type(exc).__name__}: {exc}")
        proto.write(json.dumps(out) + "\n")
        proto.flush()
        os._exit(1)
    for cid in [c.strip() for c in args.checks.split(",") if c.strip()]:
        fn = CHECKS.get(cid)
        t0 = time.perf_counter()
        if fn is None:
            entry = {"id": cid, "ok": False, "detail": "unknown check"}
        else:
            try:
                entry = {"id": cid, "ok": True, "detail": fn(ctx)}
            except Failed as exc:
                entry = {"id": cid, "ok": False, "detail": str(exc)}
            except (Exception, SystemExit) as exc:  # noqa: BLE001 - every failure is a result
                entry = {
                    "id": cid,
                    "ok": False,
                    "detail": f"{type(exc).__name__}: {exc}",
                    "traceback": traceback.format_exc()[-2000:],
                }
        entry["seconds"] = round(time.perf_counter() - t0, 3)
        out["checks"].append(entry)
        out["ok"] = out["ok"] and entry["ok"]
    proto.write(json.dumps(out) + "\n")
    proto.flush()
    os._exit(0 if out["ok"] else 1)


if __name__ == "__main__":
    main()
