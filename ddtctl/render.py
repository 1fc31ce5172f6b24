"""A profile rendered to what `ddtctl deploy` launches: the argv of `python -m sglang.launch_server`, one
shell command, or the YAML SGLang's own `--config` reads back into the same argv (ddtctl/sglang_config.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ddtctl.errors import ProfileError
from ddtctl.flags import render_flag
from ddtctl.profile import Profile
from ddtctl.schema.catalog import Catalog


def render_argv(profile: Profile, catalog: Catalog | None = None) -> list[str]:
    """`--model-path` first, then the server flags in profile order,
    with the options SGLang's parser knows."""
    if catalog is None:
        from ddtctl.schema.extensions import extended_catalog

        catalog = extended_catalog(profile.sglang)
    argv = ["--model-path", profile.model.path]
    for key, value in profile.server.items():
        spec = catalog.get(key)
        if spec is None:
            raise ProfileError(
                f"server.{key}: unknown SGLang {catalog.version} flag",
                fix="run `ddtctl validate` on the profile",
            )
        argv.extend(render_flag(spec, value))
    return argv


RENDER_FORMATS = ("argv", "shell", "sglang-config")
# SGLang 0.5.23's recommended entry point (`python -m sglang.launch_server` warns that it is deprecated)
DEFAULT_LAUNCHER = ("sglang", "serve")


@dataclass
class Rendered:
    """What a profile launches: the server argv, its environment, and the text in the asked format."""

    source: str
    format: str
    launcher: list[str]
    argv: list[str]
    env: dict[str, str]
    config: dict[str, Any] | None
    text: str

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "format": self.format,
            "launcher": self.launcher,
            "argv": self.argv,
            "env": self.env,
            "config": self.config,
            "text": self.text,
        }


def _masked_argv(argv: list[str]) -> list[str]:
    from ddtctl.argv import mask_argv

    return mask_argv(argv)


def render_profile(path: str, fmt: str = "argv", *, show_secrets: bool = False) -> Rendered:
    """A profile as `ddtctl deploy` would launch it: argv (a JSON list), shell (one copy-pasteable command) or
    sglang-config (the YAML that SGLang's own `--config` reads back into the same argv). Secret values (flags
    such as --api-key, environment names such as HF_TOKEN) are masked unless show_secrets: the shell form
    refers to the caller's own environment variable instead."""
    import shlex

    import yaml

    from ddtctl.argv import SECRET_ENV
    from ddtctl.profile import load_profile
    from ddtctl.schema.extensions import extended_catalog
    from ddtctl.sglang_config import profile_to_config

    if fmt not in RENDER_FORMATS:
        raise ProfileError(f"unknown render format {fmt!r}", fix=f"use one of {', '.join(RENDER_FORMATS)}")
    loaded = load_profile(path)
    prof = loaded.profile
    catalog = extended_catalog(prof.sglang)
    argv = render_argv(prof, catalog)
    shown = argv if show_secrets else _masked_argv(argv)
    launcher = list(prof.launch.launcher or DEFAULT_LAUNCHER)
    env = dict(prof.env)
    secret_env = {k for k in env if SECRET_ENV.search(k)}
    shown_env = env if show_secrets else {k: ("***" if k in secret_env else v) for k, v in env.items()}
    config = None
    if fmt == "argv":
        text = json.dumps(launcher + shown)
    elif fmt == "shell":
        assigns = [
            f"{k}={shlex.quote(v)}" if show_secrets or k not in secret_env else f'{k}="${{{k}}}"'
            for k, v in env.items()
        ]
        words = [shlex.quote(w) for w in launcher] + [shlex.quote(w) for w in shown]
        lines, line = [], (["env", *assigns] if assigns else []) + words[: len(launcher)]
        i = 0
        while i < len(shown):  # one flag (and its values) per line
            group = [words[len(launcher) + i]]
            i += 1
            while i < len(shown) and not shown[i].startswith("--"):
                group.append(words[len(launcher) + i])
                i += 1
            lines.append(" ".join(line))
            line = ["   ", *group]
        lines.append(" ".join(line))
        text = " \\\n".join(lines)
    else:
        config = profile_to_config(prof.model.path, prof.server, catalog)
        if not show_secrets:
            from ddtctl.argv import is_secret_flag

            config = {
                k: ("***" if is_secret_flag(k) and v not in (None, False, "") else v)
                for k, v in config.items()
            }
        header = [
            f"# SGLang {prof.sglang} server config rendered by ddtctl from {loaded.source}",
            f"# launch: {' '.join(launcher)} --config THIS_FILE.yaml",
        ]
        if env:
            header.append(
                "# environment (not part of SGLang's config): "
                + ", ".join(f"{k}={shown_env[k]}" for k in env)
            )
        text = "\n".join(header) + "\n" + yaml.safe_dump(config, sort_keys=False, default_flow_style=False)
    return Rendered(
        source=loaded.source,
        format=fmt,
        launcher=launcher,
        argv=shown,
        env=shown_env,
        config=config,
        text=text,
    )
