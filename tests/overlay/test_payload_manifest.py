"""The bundled payload's manifest, without SGLang: what it ships, from where, and how dry-run picks it."""

from __future__ import annotations

import configparser

import pytest

from ddtctl.errors import UsageError
from ddtctl.overlay.dryrun_support import argv_uses_ddtree, overlay_sys_path, view_for
from ddtctl.overlay.source import DDTCTL_ROOT, default_payload_dir, load_source_manifest, sha256_file

M = load_source_manifest()


def test_targets_the_pinned_release_and_patches_little():
    assert (M.name, M.sglang) == ("ddtree-sglang", "0.5.23")
    assert {p.path for p in M.patched} == {"sglang/srt/arg_groups/fields/spec.py",
                                           "sglang/srt/arg_groups/speculative_hook.py",
                                           "sglang/srt/speculative/spec_utils.py",
                                           "sglang/srt/mem_cache/memory_pool.py"}  # a hook point, no behaviour
    for p in M.patched:
        assert (M.root / p.patch).is_file() and len(p.base_sha256) == len(p.result_sha256) == 64


def test_every_file_in_the_payload_dir_is_listed_and_pinned():
    listed = {a.source for a in M.added if not a.source.startswith("ddtctl:")}
    on_disk = {str(p.relative_to(M.root)) for p in (M.root / "files").rglob("*")
               if p.is_file() and "__pycache__" not in p.parts}
    assert on_disk == listed
    stale = [a.path for a in M.added if not a.source.startswith("ddtctl:")
             and a.sha256 != sha256_file(M.source_path(a))]
    assert stale == [], "run `ddtctl overlay manifest --update`"


def test_the_rules_are_shipped_as_an_unmodified_copy():
    rules = next(a for a in M.added if a.path == "ddtree_sglang/rules_core.py")
    assert rules.source == "ddtctl:rules/ddtree/core.py" and not rules.rewrite and not rules.tree
    assert M.source_path(rules) == DDTCTL_ROOT / "rules" / "ddtree" / "core.py"
    expanded = {rel: src for rel, src, _ in M.expand_added()}
    assert expanded["ddtree_sglang/rules_core.py"].read_bytes() == (DDTCTL_ROOT / "rules/ddtree/core.py").read_bytes()


def test_kernels_and_their_imports():
    kernels = next(a for a in M.added if a.path == "ddtree_sglang/kernels")
    assert kernels.tree and kernels.source == "ddtctl:kernels"
    assert kernels.rewrite == {"ddtctl.kernels": "ddtree_sglang.kernels", "ddtctl.errors": "ddtree_sglang.errors"}
    assert any(a.path == "ddtree_sglang/errors.py" and a.source == "ddtctl:errors.py" for a in M.added)


def test_entry_point_is_sglangs_general_plugin_group():
    ep = next(default_payload_dir().glob("files/*.dist-info/entry_points.txt"))
    cfg = configparser.ConfigParser()
    cfg.read(ep)
    assert dict(cfg["sglang.srt.plugins"]) == {"ddtree": "ddtree_sglang.plugin:register"}


def test_smoke_checks_cover_the_issue():
    ids = [c["id"] for c in M.smoke]
    assert {"registered", "family", "flags", "resolve", "rules", "launch_refused", "kernels"} <= set(ids)


@pytest.mark.parametrize("argv,expected", [
    (["--speculative-algorithm", "DDTREE"], True),
    (["--speculative-algorithm", "ddtree"], True),
    (["--speculative-algorithm=DDTree"], True),
    (["--speculative-algorithm", "DFLASH", "--speculative-ddtree-budget", "8"], False),
    (["--model-path", "DDTREE"], False),
])
def test_auto_overlay_only_for_ddtree(argv, expected):
    assert argv_uses_ddtree(argv) is expected


def test_overlay_none_and_not_needed_do_not_build():
    assert overlay_sys_path("none", argvs=[["--speculative-algorithm", "DDTREE"]]) == []
    assert overlay_sys_path("auto", argvs=[["--speculative-algorithm", "EAGLE3"]]) == []


def test_overlay_path_must_be_a_payload(tmp_path):
    with pytest.raises(UsageError, match="not a payload"):
        view_for(tmp_path)
