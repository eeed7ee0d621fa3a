"""The machinery around the lesson (agent.py and model_client.py), each concern in the module
named for it. The lesson imports this package; nothing here imports the lesson: what the
command line needs from it is handed to cli.main().

    cli             the command line: options, session opened, exit codes
    settings        the run's settings and options, parsed once into one typed object
    session         what lasts a whole session: workspace, conversation, totals, budget, window
    completions     one request to the model, plain or streamed, and servers' stream repairs
    replies         the assistant message sent back in the history; the answer to show
    reply_shapes    every reply's fields checked for the kinds the agent relies on
    errors          AgentError, and the one line that explains an API error
    events          what happens, as one stream of typed events; the --json readers of it
    display         the terminal view (a reader of the events) and the terminal's user
    prompt          --chat's next message, typed at the "> " prompt
    text            text made safe and short for a terminal: escapes, one line, columns
    processes       run_shell's process group, time-out, signals, and the sandbox
    files           capped reads and atomic writes
    tool_schema     a tool's schema, its function and a call's arguments checked
    added_tools     the door for tools beside the lesson's TOOLS and TOOL_MAP
    daily_tools     edit_file, search, list_files, read_file's offset and limit (daily use)
    search          search's and list_files' walk, .gitignore, in a child killed on time-out
    transcripts     the conversation written as JSON Lines, read back, shown (--show)
    wire            every request and response kept, rebuilt, shown (--show --wire)
    wire_page       --html: the requests and responses as one page for a browser
    sessions        the sessions folder: IDs, listing, finding one again, one writer each
    scripted        a scripted model client and a scripted user, for tests and scripts
    replay          --replay: the scripted client of a transcript's replies
    cost            prices, peak hours, what a reply cost; the typed totals of tokens and cost
    models          what is known of each model by name: context window, prices
    context_window  compaction, and a server's "the context is full"
    window_probe    how large the server's context window is
    mcp_servers     tools from MCP servers: configured, approved, started, called
    permissions     whether a tool call that needs the user's say may run

Imports inside functions, all for start-up time (`agent.py --help` must stay close to a bare
`import argparse`): the packages openai, pydantic and python-dotenv (half a second, and only a
request needs them), and from the standard library urllib.request (40 ms of http, email and
ssl), hashlib (OpenSSL), tempfile (shutil, random), threading, subprocess, signal, shutil,
inspect and difflib, each where it is used; the mcp SDK (its pydantic and httpx: seconds),
asyncio and logging where a configured MCP server starts; ctypes (for inotify) where a
recording session starts on Linux; and fcntl or msvcrt, which exist on one system each.
"""
