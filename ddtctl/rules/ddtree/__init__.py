"""DDTREE's own rules (the DDTREE payload's, not SGLang's): importing `checks`, `kernels` and `schedule`
registers them (ddtctl.rules.load_rules does).

    core       the one source of truth of the DDTREE rules, shipped byte for byte into the payload as
               ddtree_sglang/rules_core.py (standard library only; ddtctl/elsewhere.py)
    checks     DDT101-DDT115 and DDT120: one check per DDTREE rule over `core`, DDT114's verify scratch
    kernels    DDT116: the payload's hybrid kernels as the profile's `env:` switches them
    schedule   DDT117: the budget schedule
"""
