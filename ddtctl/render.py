"""A profile rendered to what `ddtctl deploy` launches: the argv of `python -m sglang.launch_server`, one
shell command, or the YAML SGLang's own `--config` reads back into the same argv (ddtctl/sglang_config.py).

The argv comes from ddtctl/server_argv.py (`render_argv`, the one place a profile becomes SGLang argv: render,
dry-run, deploy, tune and diff-flags call it): each value written so that SGLang's argparse reads it back as
that value, and the argv parsed back and compared with the profile's typed values (RenderMismatch, exit 70, on
a difference: a ddtctl bug, never a launch). The --config form is checked the same way.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from ddtctl.argv import MASK, SECRET_ENV, is_secret_flag
from ddtctl.errors import ProfileError, UsageError
from ddtctl.launch_tokens import carry_problem, safe_alone
from ddtctl.profile import Profile, load_profile
from ddtctl.schema.catalog import Catalog
from ddtctl.schema.extensions import extended_catalog
from ddtctl.server_argv import LaunchGroup, check_round_trip, launch_groups

# re-exported: its callers (dry-run, tune, diff-flags, bench) import them from here
from ddtctl.server_argv import RenderMismatch as RenderMismatch
from ddtctl.server_argv import render_argv as render_argv
from ddtctl.sglang_config import config_to_argv, profile_to_config

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
    warnings: list[str] = field(
        default_factory=list
    )  # what the launch may not do as meant (stderr in text mode)
    host: str | None = None  # `--host NODE`: the inventory node this launch is for (deploy's, with its rank)
    node_rank: int | None = None
    nnodes: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "format": self.format,
            "launcher": self.launcher,
            "argv": self.argv,
            "env": self.env,
            "config": self.config,
            "text": self.text,
            "warnings": self.warnings,
            "host": self.host,
            "node_rank": self.node_rank,
            "nnodes": self.nnodes,
        }


@dataclass
class NodeLaunch:
    """What `ddtctl deploy` launches on one inventory node (ddtctl.deploy.spec.DeploySpec.targets): its
    launcher and environment, and the multi-node flags it appends to the profile's argv."""

    host: str
    rank: int
    nnodes: int
    launcher: list[str]
    env: dict[str, str]
    extra: list[str]  # --nnodes N --node-rank R --dist-init-addr ADDR (none on one node)


def masked_tokens(group: LaunchGroup) -> list[str]:
    """A group's tokens with a secret flag's value(s) masked, however they were written (`--api-key X`,
    `--api-key=--X`)."""
    tokens = group.tokens
    if group.spec is None or not tokens or not is_secret_flag(group.spec.name):
        return list(tokens)
    if len(tokens) == 1:
        option, eq, _ = tokens[0].partition("=")
        return [f"{option}={MASK}"] if eq else list(tokens)
    return [tokens[0]] + [MASK] * (len(tokens) - 1)


def _shell_text(launcher: list[str], groups: list[list[str]], assigns: list[str]) -> str:
    import shlex

    lines = [" ".join((["env", *assigns] if assigns else []) + [shlex.quote(w) for w in launcher])]
    lines += ["    " + " ".join(shlex.quote(w) for w in group) for group in groups if group]
    return " \\\n".join(lines)


def _config_values_carried(config: dict[str, Any], catalog: Catalog) -> None:
    """SGLang's --config passes every value as its own argument (ConfigArgumentMerger): refuse a value its
    parser would read as an option there (the argv and shell forms write it `--flag=value`)."""
    for key, value in config.items():
        if value == []:
            raise ProfileError(
                f"{key}: SGLang's --config leaves out a flag whose list is empty",
                fix="remove the empty list, or render --as argv or --as shell",
            )
        for token in config_to_argv({key: value}, catalog)[1:]:
            if carry_problem(token) or not safe_alone(token, catalog):
                raise ProfileError(
                    f"{key}: SGLang's --config would pass "
                    + ("the value" if is_secret_flag(key) else repr(token[:40]))
                    + " as its own argument, which its parser reads as an option",
                    fix="render --as argv or --as shell (they write it --flag=value)",
                )


def _sglang_config(prof: Profile, groups: list[LaunchGroup], catalog: Catalog) -> dict[str, Any]:
    """The --config mapping, checked the way SGLang reads it: the YAML text loaded back, expanded into argv by
    SGLang's merger (sglang_config.config_to_argv) and parsed back into the profile's values."""
    import yaml

    config = profile_to_config(prof.model.path, prof.server, catalog)
    for key, value in config.items():
        spec = catalog.get(key)
        if spec is not None and spec.type == "json" and isinstance(value, list):
            # SGLang's merger splits a YAML list into one argument per item; a JSON flag takes one JSON text
            config[key] = json.dumps(value, separators=(",", ":"))
    _config_values_carried(config, catalog)
    loaded = yaml.safe_load(yaml.safe_dump(config, sort_keys=False))
    check_round_trip(config_to_argv(loaded, catalog), groups, catalog, prof.model.path, form="sglang-config")
    return config


def render_profile(
    path: str,
    fmt: str = "argv",
    *,
    show_secrets: bool = False,
    overrides: Sequence[Any] = (),
    node_of: Callable[[Any, list[str]], NodeLaunch] | None = None,
) -> Rendered:
    """A profile as `ddtctl deploy` would launch it: argv (a JSON list), shell (one copy-pasteable command) or
    sglang-config (the YAML that SGLang's own `--config` reads back into the same argv). Secret values (flags
    such as --api-key, environment names such as HF_TOKEN) are masked unless show_secrets: the shell form
    refers to the caller's own environment variable instead. `overrides`: `--set KEY=VALUE`
    (ddtctl.profile_overrides). `node_of(loaded, argv)`: the launch on one inventory node as deploy makes it
    (ddtctl.render_host.render_on_host passes deploy's: the host's launcher and environment, and the
    multi-node flags with the node's rank); argv and shell only."""
    import shlex

    import yaml

    if fmt not in RENDER_FORMATS:
        raise ProfileError(f"unknown render format {fmt!r}", fix=f"use one of {', '.join(RENDER_FORMATS)}")
    if node_of is not None and fmt not in ("argv", "shell"):
        raise UsageError(f"--host renders a command line, not --as {fmt}", fix="--as argv or --as shell")
    loaded = load_profile(path, overrides)
    prof = loaded.profile
    catalog = extended_catalog(prof.sglang)
    try:
        groups = launch_groups(prof, catalog)
    except ProfileError as err:
        err.where = err.where or loaded.source
        raise
    argv = [token for group in groups for token in group.tokens]
    check_round_trip(argv, groups, catalog, prof.model.path)
    shown_groups = [group.tokens if show_secrets else masked_tokens(group) for group in groups]
    launcher = list(prof.launch.launcher or DEFAULT_LAUNCHER)
    env = dict(prof.env)
    node = node_of(loaded, argv) if node_of is not None else None
    if node is not None:
        launcher, env = node.launcher, node.env
        shown_groups += [node.extra[i : i + 2] for i in range(0, len(node.extra), 2)]
    shown = [token for group in shown_groups for token in group]
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
        text = _shell_text(launcher, shown_groups, assigns)
    else:
        config = _sglang_config(prof, groups, catalog)
        if not show_secrets:
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
        host=node.host if node else None,
        node_rank=node.rank if node else None,
        nnodes=node.nnodes if node else None,
    )
