"""A profile rendered to the argv of `python -m sglang.launch_server`."""

from __future__ import annotations

from ddtctl.errors import ProfileError
from ddtctl.flags import render_flag
from ddtctl.profile import Profile
from ddtctl.schema.catalog import Catalog


def render_argv(profile: Profile, catalog: Catalog | None = None) -> list[str]:
    """`--model-path` first, then the server flags in profile order, with the options SGLang's parser knows."""
    if catalog is None:
        from ddtctl.schema.extensions import extended_catalog

        catalog = extended_catalog(profile.sglang)
    argv = ["--model-path", profile.model.path]
    for key, value in profile.server.items():
        spec = catalog.get(key)
        if spec is None:
            raise ProfileError(f"server.{key}: unknown SGLang {catalog.version} flag",
                               fix="run `ddtctl validate` on the profile")
        argv.extend(render_flag(spec, value))
    return argv
