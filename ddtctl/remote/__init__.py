"""Deploying SGLang servers to GPU hosts over SSH.

Local side (imports paramiko, so only imported inside commands): inventory, transport, facts, shipping,
launching. Remote side: `agent.py` is a stdlib-only script shipped to the host and run there with the host's
python; every remote action is one agent operation whose arguments travel as base64 JSON (never through a
shell).
"""
