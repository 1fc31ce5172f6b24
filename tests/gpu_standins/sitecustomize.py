"""Test-only: loaded by every Python process that has tests/gpu_standins first on PYTHONPATH (see README.md)."""

import os

if os.environ.get("DDTREE_GPU_STANDINS") == "1":
    import standin_extensions  # noqa: F401  (installs the import hooks)

    if os.environ.get("DDTREE_TEST_WEIGHTS") == "informative":
        import informative_weights

        informative_weights.install()

    if os.environ.get("DDTREE_TEST_DRAFT_DTYPE_GUARD") == "1":
        import draft_dtype_guard

        draft_dtype_guard.install()

    if os.environ.get("DDTREE_TEST_DRAFT_HOOK"):
        import oracle_drafter

        oracle_drafter.install_dflash_patch()
