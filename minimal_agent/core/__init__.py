"""The core layer: the loop's core: the session, events, requests and replies, the context window,
cost, settings, the scripted and replayed clients.

Its modules import from every layer but views/ (tests/test_layers.py checks)."""
