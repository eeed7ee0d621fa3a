"""The common layer: what every layer uses: text made safe for a terminal, errors, safe files, the
messages' field names, the settings files' change check.

Its modules import nothing else of the package."""
