"""The machinery around the lesson (agent.py and model_client.py), in five layers, lowest
first; a module imports from its own layer and those before it only (tests/test_layers.py).
The lesson imports this package; nothing here imports the lesson: what the command line needs
from it is handed to cli.main().

    common/         what every layer uses
      text            text made safe and short for a terminal: escapes, one line, columns
      errors          AgentError, UsageError, and the API key kept out of every message
      files           capped reads, atomic writes, records never written through a link
      messages        the fields a reply's thinking comes in; a JSON value's kind
      settings_guard  a settings file a run changed is not read again until saved
    tools/          what the model's calls run, beside agent.py's three
      processes       run_shell's process group, time-out, signals, and the sandbox
      tool_schema     a tool's schema, its function and a call's arguments checked
      tool_results    a tool's return value as text
      diffs           a write's line and diff; --confirm-writes asks
      added_tools     the door for tools beside the lesson's TOOLS and TOOL_MAP
      daily_tools     edit_file, search, list_files, read_file's offset and limit
      search          search's and list_files' walk, .gitignore, in a child killed on time-out
      permissions     whether a tool call that needs the user's say may run
      hooks           the user's commands before and after a call, and at the end
      mcp_servers     tools from MCP servers: configured, approved, started, called
    stores/         what is kept on disk
      conversations   the sessions folder: IDs, listing, finding one again, one writer each
      transcripts     the conversation written as JSON Lines, read back, shown (--show)
      wire_record     every request and response kept, and rebuilt
      changes         each turn's changes to the workdir: --undo, --redo, /diff
    core/           the loop's core
      session         what lasts a whole session: workspace, conversation, totals, budget
      events          what happens, as one stream of typed events
      completions     one request to the model, plain or streamed, and servers' stream repairs
      replies         the assistant message sent back in the history; the answer to show
      reply_checks    every reply's fields checked for the kinds the agent relies on
      context_window  compaction, and a server's "the context is full"
      window_probe    how large the server's context window is
      cost            prices, peak hours, what a reply cost
      models          what is known of each model by name: context window, prices
      api_errors      the one line that explains an API error
      settings        the run's settings and options, parsed once into one typed object
      settings_json   settings.json's permission rules and hooks
      scripted        a scripted model client and a scripted user, for tests and scripts
      replay          --replay: the scripted client of a transcript's replies
    views/          what the user sees: readers of the events, and the terminal's questions
      display         the terminal view and the terminal's user
      prompt          --chat's next message, typed at the "> " prompt
      json_output     --json's record and --json-events' lines on stdout
      wire_text       --show --wire: the record as text, each call's path through the lesson
      wire_page       --html: the requests and responses as one page for a browser
    cli             the command line, on top: options, the mode, the views wired, exit codes

Imports inside functions, all for start-up time (`agent.py --help` must stay close to a bare
`import argparse`): the packages openai, pydantic and python-dotenv (half a second, and only a
request needs them), and from the standard library urllib.request (40 ms of http, email and
ssl), hashlib (OpenSSL), tempfile (shutil, random), threading, subprocess, signal, shutil,
inspect and difflib, each where it is used; the mcp SDK (its pydantic and httpx: seconds),
asyncio and logging where a configured MCP server starts; ctypes (for inotify) where a
recording session starts on Linux; and fcntl or msvcrt, which exist on one system each.
"""
