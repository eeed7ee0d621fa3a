"""The tools layer: what the model's calls run beside agent.py's three tools, and their helpers:
processes and the sandbox, schemas, diffs, the daily tools, rules, hooks, MCP servers.

Its modules import only from common/ and this layer (tests/test_layers.py checks)."""
