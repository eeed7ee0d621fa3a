"""The views layer: what the user sees, as readers of the events: the terminal and its questions,
the --chat prompt, --json's output, the wire as text and as a page.

Only the command line (cli.py) imports them (tests/test_layers.py checks)."""
