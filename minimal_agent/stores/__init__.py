"""The stores layer: what is kept on disk: the conversations in the sessions folder, transcripts,
the wire record, each turn's changes for undo.

Its modules import only from common/, tools/ and this layer (tests/test_layers.py checks)."""
