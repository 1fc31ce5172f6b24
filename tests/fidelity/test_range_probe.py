"""ddtctl's numeric ranges split by what SGLang 0.5.23 enforces (issue #32 item 1): RESOLVER_ENFORCED is what the real
resolver rejects (range_probe.py), an enforced side is an error (DDT002), any other side a warning (DDT013)."""

from __future__ import annotations

import pytest
from range_probe import probe

from ddtctl.schema.flag_models import RESOLVER_ENFORCED, RUNTIME_EVIDENCE
from ddtctl.validate import validate_argv


@pytest.mark.sglang
def test_resolver_enforced_is_what_the_resolver_rejects():
    seen = probe()
    enforced = {key for key, err in seen.items() if err is not None}
    assert enforced == set(RESOLVER_ENFORCED), sorted(enforced ^ set(RESOLVER_ENFORCED))
    assert not set(RUNTIME_EVIDENCE) & enforced  # evidence is for what the resolver lets through
    assert set(RUNTIME_EVIDENCE) <= set(seen)


def _rules(argv: list[str]) -> dict[str, str]:
    report = validate_argv(["--model-path", "/models/x", *argv], sglang="0.5.23", source="t")
    return {f.rule: f.severity for f in report.findings if f.rule in ("DDT002", "DDT013")}


@pytest.mark.parametrize(
    "argv,want",
    [
        (["--port", "0"], {"DDT013": "warning"}),  # the resolver takes it (a random port)
        (["--tp-size", "0"], {"DDT013": "warning"}),
        (["--stream-interval", "0"], {"DDT013": "warning"}),
        (["--port", "30000"], {}),
        (["--port", "-1"], {"DDT002": "error"}),  # bound at every start: the socket refuses it
        (["--disaggregation-bootstrap-port", "-1"], {"DDT013": "warning"}),  # PD mode only
        (["--grpc-port", "0"], {"DDT002": "error"}),  # serving_hook.py rejects it
        (["--tokenizer-worker-num", "0"], {"DDT002": "error"}),  # validation_hook.py:273
        (["--mem-fraction-static", "1.2"], {"DDT002": "error"}),  # RUNTIME_EVIDENCE: the KV pool cannot fit
        (["--mem-fraction-static", "0.8"], {}),
        (["--mem-fraction-static", "nan"], {"DDT002": "error"}),  # not a finite number: never a range warning
    ],
)
def test_a_range_is_an_error_only_where_sglang_enforces_it(argv, want):
    assert _rules(argv) == want
