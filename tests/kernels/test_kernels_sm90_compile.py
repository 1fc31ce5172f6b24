"""The interpreter accepts code the compiler rejects: compile every kernel for sm_90 (Hopper) with the real
Triton compiler, ahead of time (no GPU needed), at the configurations the H200 bench uses."""

import os
import subprocess
import sys
import textwrap

from pathlib import Path

import pytest

pytest.importorskip("triton")

PAYLOAD_FILES = Path(__file__).resolve().parents[2] / "ddtctl" / "payload" / "ddtree-sglang-0.5.23" / "files"

SCRIPT = textwrap.dedent("""
    import triton
    from triton.backends.compiler import GPUTarget
    from ddtctl.kernels import triton_kernels as T

    assert type(T._build_kernel).__name__ != "InterpretedFunction"
    tgt = GPUTarget("cuda", 90, 32)
    p = "*fp32"

    def comp(fn, sig, cex, nw):
        sig = dict(sig, **{k: "constexpr" for k in cex})
        c = triton.compile(triton.compiler.ASTSource(fn=fn, signature=sig, constexprs=cex), target=tgt,
                           options={"num_warps": nw})
        assert c.asm["cubin"], fn
        print("compiled", fn.__name__, cex)

    for xt in ("*bf16", "*fp32"):
        comp(T._topk_pass1, {"X": xt, "GMAX": p, "PM": p, "PL": p, "V": "i32", "n_tiles": "i32",
                             "tiles_per_split": "i32", "S": "i32", "stride_row": "i32", "G_STRIDE": "i32"},
             {"GS": 64, "NG": 64}, 4)
        comp(T._topk_pass2, {"X": xt, "GMAX": p, "PM": p, "PL": p, "SCR_G": "*i32", "SCR_K": "*i64",
                             "SCR_C": "*i64", "LP_OUT": p,
                             "ID_OUT": "*i32", "V": "i32", "n_groups": "i32", "S": "i32", "K": "i32",
                             "stride_row": "i32", "G_STRIDE": "i32"},
             {"GS": 64, "G_PAD": 4096, "S_PAD": 32, "K_PAD": 64, "Q": 64, "SHIFT": 16 if xt == "*bf16" else 0,
              "CAP": 256}, 16)
    comp(T._build_kernel, {"LP": p, "IDS": "*i32", "TOK_OUT": "*i32", "DEP_OUT": "*i32", "PAR_OUT": "*i32",
                           "SCORE_OUT": p, "PRE_OUT": "*i32", "SIZE_OUT": "*i32", "L": "i32", "K": "i32",
                           "B": "i32"}, {"F": 128}, 1)
    comp(T._compile_kernel, {"PAR": "*i32", "PRE": "*i32", "SIZE": "*i32", "TOK": "*i32", "DEP": "*i32",
                             "ROOT": "*i64", "START": "*i64", "IDS_OUT": "*i64", "POS_OUT": "*i64",
                             "VIS_OUT": "*i8",
                             "PACK_OUT": "*i32", "RIDX_OUT": "*i64", "RNEXT_OUT": "*i64", "RSIB_OUT": "*i64",
                             "B": "i32", "W": "i32"}, {"BR": 16, "WT": 2}, 4)
    comp(T._follow_kernel, {"IDS": "*i64", "PAR": "*i32", "POST": "*i64", "ACC_OUT": "*i32",
                            "ALEN_OUT": "*i32", "BONUS_OUT": "*i64", "B": "i32", "L": "i32"}, {"F": 128}, 1)
""")


def _compile_for_sm90(script: str) -> str:
    """Runs `script` in a fresh interpreter with Triton's compiler (not its interpreter); its stdout."""
    env = dict(os.environ, TRITON_INTERPRET="0")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=1200)  # a hang guard; beside parallel workers
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    return run.stdout


def test_all_kernels_compile_for_sm90():
    assert _compile_for_sm90(SCRIPT).count("compiled") == 7


COMPILE_FOR_SM90 = textwrap.dedent("""
    import triton
    from triton.backends.compiler import GPUTarget

    tgt = GPUTarget("cuda", 90, 32)
    SMEM = 227 * 1024  # an H200 block's shared memory

    def comp(fn, sig, cex, nw):
        sig = dict(sig, **{k: "constexpr" for k in cex})
        c = triton.compile(triton.compiler.ASTSource(fn=fn, signature=sig, constexprs=cex), target=tgt,
                           options={"num_warps": nw})
        assert c.asm["cubin"] and c.metadata.shared <= SMEM, (fn, c.metadata.shared)
        print("compiled", fn.__name__, cex, c.metadata.shared)
""")

GDN_TREE_SCRIPT = COMPILE_FOR_SM90 + textwrap.dedent("""
    from ddtctl.kernels import gdn_tree as G

    assert type(G._tree_gdn_verify_kernel).__name__ != "InterpretedFunction"

    verify = {"q": "*bf16", "k": "*bf16", "v": "*bf16", "a": "*bf16", "b": "*bf16", "A_log": "*fp32",
              "dt_bias": "*fp32", "o": "*bf16", "h0": "*fp32", "h0_idx": "*i32", "rec": "*fp32",
              "rec_idx": "*i32",
              "parent": "*i64", "cu": "*i32", "anc_in": "*i1", "scale": "fp32", "T": "i32", "sq_t": "i32",
              "sk_t": "i32", "sv_t": "i32", "sa_t": "i32", "sb_t": "i32", "s_h0": "i64", "s_rec": "i64",
              "s_rec_step": "i32", "s_par": "i32", "s_anc": "i32"}
    # Qwen3.6-27B's GDN at tp 1 and tp 2; TF32 (the default) and tf32x3; the ancestor matrix derived and given;
    # tree_gdn_verify's default BV 32 and the server's (SERVER_BV: hybrid.py CompactTreeVerify.BLOCK_V)
    # FULL (DDTCTL_FULL_COMPILE=1, `make kernels-compile`): every launch below; otherwise (`make test`) the
    # server's default ones only (tf32 verify at the server's block_v, block 2 on 16 rows, the commits): each
    # compile here costs 10-60 s of a core, 17 of them ~7 minutes
    for tp, heads, prec, bv, anc, ci in ((32, (16, 48), "tf32", 32, False, False),
                                         (64, (16, 48), "tf32", 32, False, False),
                                         (64, (8, 24), "tf32", 32, True, True),
                                         (64, (16, 48), "tf32x3", 32, False, False),
                                         (64, (16, 48), "tf32", SERVER_BV, False, True),
                                         (64, (16, 48), "tf32x3", SERVER_BV, False, False)):
        if not (ci or FULL):
            continue
        comp(G._tree_gdn_verify_kernel, verify, {"TP": tp, "H": heads[0], "HV": heads[1], "K": 128, "V": 128,
                                                 "BV": bv, "S": 4, "PREC": prec, "THRESHOLD": 20.0,
                                                 "ANC_GIVEN": anc}, 4 if tp <= 32 else 8)
    # 65..128 nodes: the two-block kernel's [64, 64] tiles as tree_gdn_verify launches them (8 warps; tf32x3
    # with BV 16: 240 KiB at BV 32 does not fit); a single 128-node tile needs 264-288 KiB. Block 2 on 64 rows
    # (97..128 nodes, or forced), 16 (65..80: the flagship's budget 64) and 32 (81..96; the server's launch)
    for heads, prec, bv, anc, rows2 in (((16, 48), "tf32", 32, False, (64, 16)),
                                        ((8, 24), "tf32", 32, True, (64, 16)),
                                        ((16, 48), "tf32", SERVER_BV, False, (64, 32, 16)),
                                        ((16, 48), "tf32x3", min(SERVER_BV, 16), False, (64, 16))):
        for bt2 in rows2:
            if not (FULL or (prec, bv, anc, bt2) == ("tf32", SERVER_BV, False, 16)):
                continue
            comp(G._tree_gdn_verify_two_block_kernel, verify,
                 {"BT": G.TWO_BLOCK_TILE, "BT2": bt2, "H": heads[0], "HV": heads[1], "K": 128, "V": 128,
                  "BV": bv, "S": 4, "PREC": prec, "THRESHOLD": 20.0, "ANC_GIVEN": anc}, 8)
    commit = {"state": "*fp32", "rec": "*fp32", "state_idx": "*i32", "rec_idx": "*i32", "acc_idx": "*i64",
              "acc_len": "*i32", "track_idx": "*i32", "track_node": "*i64", "T": "i32",
              "s_state_layer": "i64",
              "s_state_slot": "i64", "s_rec_layer": "i64", "s_rec_slot": "i64", "s_rec_step": "i32",
              "s_acc": "i32"}
    for track in (False, True):
        comp(G._tree_gdn_commit_kernel, commit, {"AP": 16, "H": 16, "HV": 48, "K": 128, "V": 128, "BV": 32,
                                                 "HAS_TRACK": track, "PREC": "tf32x3"}, 4)
""")


def test_gdn_tree_kernels_compile_for_sm90_within_a_blocks_shared_memory(monkeypatch):
    """The compact GDN tree verify fits an H200 block: the single-tile kernel (<= 64 nodes) and the two-block
    kernel (65..128 nodes, block 2 on 16, 32 or 64 rows) at the launches tree_gdn_verify makes, with its
    default block_v and the server's (the payload's CompactTreeVerify). `make test` compiles the server's
    default launches (5); DDTCTL_FULL_COMPILE=1 (`make kernels-compile`) all 17."""
    pytest.importorskip("torch")
    monkeypatch.syspath_prepend(str(PAYLOAD_FILES))
    from ddtree_sglang import hybrid

    full = os.environ.get("DDTCTL_FULL_COMPILE") == "1"
    script = f"SERVER_BV = {hybrid.CompactTreeVerify.BLOCK_V}\nFULL = {full}\n" + GDN_TREE_SCRIPT
    assert _compile_for_sm90(script).count("compiled") == (17 if full else 5)


GDN_LEVELS_SCRIPT = COMPILE_FOR_SM90 + textwrap.dedent("""
    from ddtctl.kernels import gdn_levels as L

    assert type(L._tree_gdn_verify_levels_kernel).__name__ != "InterpretedFunction"

    verify = {"q": "*bf16", "k": "*bf16", "v": "*bf16", "a": "*bf16", "b": "*bf16", "A_log": "*fp32",
              "dt_bias": "*fp32", "o": "*bf16", "h0": "*fp32", "h0_idx": "*i32", "rec": "*fp32",
              "rec_idx": "*i32", "parent": "*i64", "cu": "*i32", "anc_in": "*i1", "scale": "fp32", "T": "i32",
              "sq_t": "i32", "sk_t": "i32", "sv_t": "i32", "sa_t": "i32", "sb_t": "i32", "s_h0": "i64",
              "s_rec": "i64", "s_rec_step": "i32", "s_par": "i32", "s_anc": "i32"}
    # Qwen3.6-27B's GDN at tp 1: the server's launch (DDTREE_GDN_SOLVE=auto: two levels a step from 81 nodes, one
    # 128-row tile, the server's block_v, the ancestors given: the shared matrix) and levels16's (four squaring
    # stages, then the level steps); FULL (`make kernels-compile`) also 17 nodes (one 32-row tile), one level a
    # step, levels4, and the ancestors derived at block_v 32
    launches = [(128, SERVER_BV, 2, True), (128, SERVER_BV, 16, True)]
    if FULL:
        launches += [(32, SERVER_BV, 1, True), (128, SERVER_BV, 1, True), (128, SERVER_BV, 4, True),
                     (128, 32, 1, False)]
    for tp, bv, levels, anc in launches:
        comp(L._tree_gdn_verify_levels_kernel, verify,
             {"TP": tp, "H": 16, "HV": 48, "K": 128, "V": 128, "BV": bv, "S": 5, "PREC": "tf32",
              "THRESHOLD": 20.0, "ANC_GIVEN": anc, "LOG_LEVELS": levels.bit_length() - 1}, L._warps(tp))
""")


def test_gdn_level_verify_compiles_for_sm90_within_a_blocks_shared_memory(monkeypatch):
    """The level-step GDN verify (gdn_levels.py) at the server's launch and at levels16's fits an H200 block's
    shared memory, a single 128-node tile; DDTCTL_FULL_COMPILE=1 (`make kernels-compile`) compiles the other four
    launches too."""
    pytest.importorskip("torch")
    monkeypatch.syspath_prepend(str(PAYLOAD_FILES))
    from ddtree_sglang import hybrid

    full = os.environ.get("DDTCTL_FULL_COMPILE") == "1"
    script = f"SERVER_BV = {hybrid.CompactTreeVerify.BLOCK_V}\nFULL = {full}\n" + GDN_LEVELS_SCRIPT
    assert _compile_for_sm90(script).count("compiled") == (6 if full else 2)


CONV_TREE_SCRIPT = COMPILE_FOR_SM90 + textwrap.dedent("""
    from ddtctl.kernels import conv_tree as C

    assert type(C._tree_conv_verify_kernel).__name__ != "InterpretedFunction"

    ints = ("T", "dim", "s_x_seq", "s_x_dim", "s_x_tok", "s_w_dim", "s_w_win", "s_st_slot", "s_st_dim",
            "s_st_win", "s_o_seq", "s_o_dim", "s_o_tok", "s_rec_slot", "s_rec_step", "s_rec_dim", "s_rec_win",
            "s_par")
    verify = {"x": "*bf16", "w": "*bf16", "bias": "*bf16", "state": "*bf16", "state_idx": "*i32",
              "out": "*bf16", "rec": "*bf16", "rec_idx": "*i32", "parent": "*i64", **{k: "i32" for k in ints}}
    # Qwen3.6-27B's conv (W = 4, bf16): the server's launch, with and without bias, and a wider one
    server = (C.VERIFY_BLOCK_T, C.VERIFY_BLOCK_N)
    for bt, bn, bias in ((*server, True), (*server, False), (32, 128, False)):
        comp(C._tree_conv_verify_kernel, verify, {"W": 4, "BT": bt, "BN": bn, "HAS_BIAS": bias, "SILU": True,
                                                  "SAME_DTYPE": True}, 4)
    # the parents at the verify widths the budget allows (17 / 33 / 65 / 129 nodes), int64 as SGLang's arrays
    parents = {"next_tok": "*i64", "next_sib": "*i64", "parent": "*i64", "T": "i32", "s_nt": "i32",
               "s_ns": "i32", "s_par": "i32"}
    for tp in (32, 64, 128, 256):
        comp(C._tree_parents_kernel, parents, {"TP": tp, "LOG_TP": (tp - 1).bit_length()},
             4 if tp <= 32 else 8)
    commit = {"state": "*bf16", "rec": "*bf16", "state_idx": "*i32", "rec_idx": "*i32", "acc_idx": "*i64",
              "acc_len": "*i32", "track_idx": "*i32", "track_node": "*i64", "T": "i32", "dim": "i32",
              "s_st_layer": "i64", "s_st_slot": "i32", "s_st_dim": "i32", "s_st_win": "i32",
              "s_rec_layer": "i64", "s_rec_slot": "i32", "s_rec_step": "i32", "s_rec_dim": "i32",
              "s_rec_win": "i32", "s_acc": "i32"}
    for track in (False, True):
        comp(C._tree_conv_commit_kernel, commit, {"AP": 16, "W": 4, "WP": 4, "BN": 256, "HAS_TRACK": track},
             4)
""")


def test_conv_tree_kernels_compile_for_sm90():
    assert _compile_for_sm90(CONV_TREE_SCRIPT).count("compiled") == 9


TREE_ATTN_SCRIPT = COMPILE_FOR_SM90 + textwrap.dedent("""
    import os, subprocess, tempfile
    from ddtctl.kernels import tree_attn as A

    assert type(A._prefix_partials_kernel).__name__ != "InterpretedFunction"
    CUOBJDUMP = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")

    def stack_bytes(fn, sig, cex, nw):
        sig = dict(sig, **{k: "constexpr" for k in cex})
        c = triton.compile(triton.compiler.ASTSource(fn=fn, signature=sig, constexprs=cex), target=tgt,
                           options={"num_warps": nw, "num_stages": 1})
        assert c.asm["cubin"] and c.metadata.shared <= SMEM, (fn, c.metadata.shared)
        with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
            f.write(c.asm["cubin"])
            f.flush()
            usage = subprocess.run([CUOBJDUMP, "-res-usage", f.name], capture_output=True, text=True).stdout
        line = next(x for x in usage.splitlines() if "STACK:" in x)
        print("compiled", fn.__name__, cex, line.strip())
        return int(line.split("STACK:")[1].split()[0])

    strides = {k: "i32" for k in ("s_ps", "s_pt", "s_ph", "s_ls", "s_lt")}
    prefix = {"Q": "*bf16", "K_Buffer": "*bf16", "V_Buffer": "*bf16", "qo_indptr": "*i32",
              "kv_indptr": "*i32", "kv_indices": "*i64", "Part_O": "*fp32", "Part_Lse": "*fp32",
              "sm_scale": "fp32", "k_scale": "fp32", "v_scale": "fp32",
              **{k: "i32" for k in ("s_qt", "s_qh", "s_kt", "s_kh", "s_vt", "s_vh")}, **strides}
    combine = {"Q": "*bf16", "K_Ext": "*bf16", "V_Ext": "*bf16", "Out": "*bf16", "Part_O": "*fp32",
               "Part_Lse": "*fp32", "qo_indptr": "*i32", "kv_indptr": "*i32", "Mask": "*u8",
               "mask_indptr": "*i64", "sm_scale": "fp32",
               **{k: "i32" for k in ("s_qt", "s_qh", "s_kt", "s_kh", "s_vt", "s_vh", "s_ot", "s_oh")},
               **strides}
    seen = set()
    # the automatic tiles of the bench's shapes: an 8B target and Qwen3.6-27B's full attention, widths 17-129
    for h_q, h_kv, dim in ((32, 8, 128), (24, 4, 256)):
        for width in (17, 33, 65, 129):
            L = A.choose_launch(1, h_q, width, dim, 4096.0)
            for fn, sig, bm, bn, nw, extra in (
                    (A._prefix_partials_kernel, prefix, L.block_m, L.block_n, L.num_warps,
                     {"MIN_KEYS": A.MIN_SPLIT_KEYS}),
                    (A._tree_combine_kernel, combine, L.combine_block_m, L.combine_block_n, L.combine_warps,
                     {"IS_CAUSAL": True})):
                if (fn.__name__, dim, bm, bn, nw) in seen:
                    continue
                seen.add((fn.__name__, dim, bm, bn, nw))
                cex = dict(GROUP=h_q // h_kv, N_QB=-(-width // bm), N_SPLITS=L.n_splits, D=dim, DV=dim,
                           BLOCK_D=dim, BLOCK_DV=dim, BLOCK_M=bm, BLOCK_N=bn, **extra)
                spilled = stack_bytes(fn, sig, cex, nw)
                # the prefix stage's 64- and 128-row tiles spill at D = 256 (and 128 rows at D = 128), yet
                # measured 1.5-2x faster on the H200 than 32 rows (bench/tree_attn_gpu.py, 2026-12-01): one tile
                # reads the prefix once. A bound, so a tile that spills far more fails here.
                limit = 512 if fn is A._prefix_partials_kernel and (bm == 128 or dim > 128) else 0
                assert spilled <= limit, ("registers spilled", fn.__name__, dim, bm, spilled)
    # what else a server may hand it: a non-causal call, SGLang's own bool mask, an fp8 KV pool
    cex = dict(GROUP=4, N_QB=3, N_SPLITS=8, D=128, DV=128, BLOCK_D=128, BLOCK_DV=128, BLOCK_M=32, BLOCK_N=32)
    stack_bytes(A._tree_combine_kernel, combine, dict(cex, IS_CAUSAL=False), 8)
    stack_bytes(A._tree_combine_kernel, dict(combine, Mask="*i1"), dict(cex, IS_CAUSAL=True), 8)
    stack_bytes(A._prefix_partials_kernel, dict(prefix, K_Buffer="*fp8e4nv", V_Buffer="*fp8e4nv"),
                dict(cex, BLOCK_M=64, BLOCK_N=64, MIN_KEYS=128), 8)
""")


def test_tree_attn_kernels_compile_for_sm90_within_their_register_budget():
    """The split-KV tree verify's automatic tiles compile for Hopper. The combine stage and the prefix stage's
    tiles under 128 rows at D = 128 keep their state in registers; the measured-faster wide tiles spill at most
    512 bytes per thread. A non-causal call, a bool mask and an fp8 KV pool compile too."""
    assert _compile_for_sm90(TREE_ATTN_SCRIPT).count("compiled") == 11
