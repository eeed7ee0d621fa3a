"""Tools from MCP servers (docs/mcp.md): the servers of the user's mcp.json (beside config.env)
and of the workdir's .mcp.json (only once the user approved that file, as it is, on the
terminal), started for the session through the `mcp` SDK (an optional extra), their tools
added to the workspace as mcp__SERVER__TOOL (minimal_agent/tools/added_tools.py). The SDK is async:
one event loop in a background thread holds every server's session, and each call waits at
most the workspace's time-out. A server that fails to start, crashes, does not answer in time
or writes junk costs one line and its tools, never the run; its stderr goes to a log file in
the sessions folder."""

from __future__ import annotations

import contextlib
import json
import os
import re

from minimal_agent.common import files, settings_guard
from minimal_agent.common.errors import holds_key
from minimal_agent.common.text import one_line, visible
from minimal_agent.tools import added_tools, permissions, processes

USER_FILE = "mcp.json"  # in the user's config folder, beside config.env
PROJECT_FILE = ".mcp.json"  # in the workdir: a repository's, so hostile until approved
APPROVALS_FILE = "mcp-approved.json"  # in the sessions folder: the approved project files
LOG_FILE = "mcp-servers.log"  # in the sessions folder: the servers' stderr
LOG_LIMIT = 1024 * 1024  # bytes of a server's stderr kept in it, each start: no disk filled
INSTALL = 'pip install "minimal-agent[mcp]"'
PROJECT_LIMIT = 64 * 1024  # bytes of a .mcp.json read; a longer one is refused
SERVER_NAME = re.compile(r"[A-Za-z0-9_-]{1,40}")
TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # what the Chat Completions API takes
VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")  # ${VAR}, ${VAR:-default}
OUTCOMES = {"failed": "did not start", "skipped": "skipped", "lost": "is gone with its tools"}
STOP_SECONDS = 5.0  # how long closing waits for the servers to stop


class Server:
    """One configured server: its name, the file it comes from (project: the workdir's), its
    settings as written; once started, its session and the tools it gave; else why not."""

    def __init__(self, name: str, spec: object, file: str, project: bool) -> None:
        self.name, self.spec, self.file, self.project = name, spec, file, project
        self.status = "configured"  # then "started", "failed" or "skipped"
        self.problem: str | None = None  # why it failed or was skipped
        self.tools: list[str] = []  # the names the model is offered
        self.settings: dict = {}  # as checked, ${VAR} expanded
        self.session = None
        self.listed = None  # a concurrent Future: the tools it lists, once it started
        self.stop = None  # an asyncio.Event: set, the server is stopped
        self.task = None  # the coroutine that keeps its session open (concurrent Future)

    @property
    def where(self) -> str:
        return f"{'the workdir' if self.project else 'your'} {os.path.basename(self.file)}"


def configured(config_folder: str, ws) -> tuple[list[Server], str | None]:
    """The servers of the user's mcp.json and the workdir's .mcp.json (a repository's: read
    through the workspace's fence), and the project file's text (None: there is none). A
    file that cannot be used costs one line and its servers."""
    servers = []
    user_file = os.path.join(config_folder, USER_FILE)
    settings_guard.refuse_settings_changed_by_a_run(user_file)  # a command may have planted it
    try:
        with open(user_file, encoding="utf-8") as file:
            servers += parsed(file.read(), user_file, False, ws.events.notice)
    except FileNotFoundError:
        pass
    except (OSError, UnicodeDecodeError) as error:
        ws.events.notice(f"skipped {user_file}: {getattr(error, 'strerror', None) or error}")
    text = project_text(ws)
    if text is not None:
        servers += parsed(text, os.path.join(ws.folder, PROJECT_FILE), True, ws.events.notice)
    return servers, text


def project_text(ws) -> str | None:
    """The workdir's .mcp.json as text, read as read_file reads (a link leading outside the
    workdir, a FIFO, a folder: skipped with one line), or None."""
    try:
        path = ws.path(PROJECT_FILE)
        with files.open_regular(ws.folder, path) as file:
            data = file.read(PROJECT_LIMIT + 1)
    except FileNotFoundError:
        return None
    except OSError as error:  # PermissionError among them: outside the workdir
        why = error.strerror if error.strerror and not isinstance(error, PermissionError) else error
        ws.events.notice(f"skipped the workdir's {PROJECT_FILE}: {why}")
        return None
    if len(data) > PROJECT_LIMIT:
        limit = PROJECT_LIMIT // 1024
        ws.events.notice(f"skipped the workdir's {PROJECT_FILE}: it is larger than {limit} KiB")
        return None
    return data.decode("utf-8", "replace")


def parsed(text: str, path: str, project: bool, say) -> list[Server]:
    """The servers of one file in the shape {"mcpServers": {"NAME": {...}}}; a file of another
    shape costs one line (said with say) and gives none."""
    try:
        servers = json.loads(text)["mcpServers"]
        if not isinstance(servers, dict):
            raise TypeError
    except (ValueError, KeyError, TypeError) as error:
        why = f"it is not valid JSON ({error})" if isinstance(error, ValueError) else (
            'it is not {"mcpServers": {"NAME": {...}}}'
        )
        say(f"skipped the MCP servers of {path}: {why}")
        return []
    return [Server(name, spec, path, project) for name, spec in servers.items()]


def checked(server: Server, key: str) -> dict | str:
    """The server's settings with ${VAR} expanded, as {"command", "args", "env"} or {"url",
    "headers"}; or, when they cannot be used, why (words that finish "it ...")."""
    spec = server.spec
    if not SERVER_NAME.fullmatch(server.name):
        return "has a name that is not 1 to 40 letters, digits, _ or -: rename it"
    if not isinstance(spec, dict):
        return 'is not an object such as {"command": "...", "args": [...]}'
    kind = spec.get("type", "stdio" if "command" in spec else "http")
    if kind not in ("stdio", "http", "streamable-http"):
        return f"has the type {kind!r}; the agent speaks stdio and http (streamable HTTP)"
    wanted = {"command": str, "args": list, "env": dict} if kind == "stdio" else {
        "url": str, "headers": dict}  # fmt: skip
    first = "command" if kind == "stdio" else "url"
    if not isinstance(spec.get(first), str) or not spec[first]:
        return f'has no "{first}"'
    settings = {}
    for field, kind_of in wanted.items():
        value = spec.get(field, kind_of())
        items = value.values() if isinstance(value, dict) else value
        if not isinstance(value, kind_of) or (kind_of is not str and not all(
                isinstance(item, str) for item in items)):  # fmt: skip
            return f'has a "{field}" that is not {"a string" if kind_of is str else "of strings"}'
        try:
            settings[field] = expanded(value)
        except KeyError as error:
            name = error.args[0]
            return f"uses ${{{name}}}, which is not set: set it, or give a default (${{{name}:-x}})"
    if holds_key(json.dumps(settings), {key} - {""}):
        return "would be handed the agent's own API key: it never leaves the agent"
    return settings


def expanded(value):
    """value (a string, a list or a dict of strings) with ${VAR} and ${VAR:-default} replaced
    from the environment; KeyError naming a variable that is not set and has no default."""
    if isinstance(value, list):
        return [expanded(item) for item in value]
    if isinstance(value, dict):
        return {name: expanded(item) for name, item in value.items()}

    def replace(match: re.Match) -> str:
        name, default = match.group(1), match.group(2)
        if name in os.environ:
            return os.environ[name]
        if default is None:
            raise KeyError(name)
        return default

    return VARIABLE.sub(replace, value)


def approved_project(text: str, ws, sessions_folder: str) -> bool:
    """Whether the workdir's .mcp.json (text) may start its servers: approved before, as it is
    now, for this workdir; else the user is asked (ws.user: on the terminal, shown whole; y or
    n), and a yes remembered. --yes does not approve it. Without a terminal: no."""
    import hashlib  # here: OpenSSL's start-up, for a workdir with a .mcp.json only

    digest = hashlib.sha256(f"{ws.folder}\0{text}".encode("utf-8", "replace")).hexdigest()
    approvals = os.path.join(sessions_folder, APPROVALS_FILE)
    known = remembered(approvals)
    if digest in known:
        return True
    if not ws.user.approves_servers(text, ws.sandbox):
        return False
    os.makedirs(sessions_folder, exist_ok=True)
    try:
        with files.replacing(approvals) as (file, _):  # no link planted there written through
            file.write(json.dumps(sorted({*known, digest})).encode())
    except OSError as error:  # approved for this start; asked again at the next
        ws.events.notice(f"the approval of {PROJECT_FILE} is not remembered: {files.why(error)}")
    return True


def remembered(approvals: str) -> set[str]:
    """The digests of the project files approved so far (none if the record is unreadable)."""
    try:
        with open(approvals, encoding="utf-8") as file:
            known = json.load(file)
    except (OSError, ValueError):
        return set()
    return {item for item in known if isinstance(item, str)} if isinstance(known, list) else set()


def start(ws, config_folder: str, sessions_folder: str, lesson_tools: dict):
    """The session's servers (Servers), started for the workspace ws, their tools in
    Servers.tools (for the session's workspace: ws's added tools and these), or None when none
    is configured. The workdir's are skipped unless the user approves its .mcp.json."""
    servers, text = configured(config_folder, ws)
    if not servers:
        return None
    running = Servers(ws, sessions_folder)
    project = [server for server in servers if server.project]
    if project and not approved_project(text, ws, sessions_folder):
        for server in project:
            running.fail(server, "not approved", status="skipped", quiet=True)
    running.start(servers, lesson_tools)
    return running


class Servers:
    """The session's servers: started in start(), called through their tools' functions,
    stopped in close(). The workspace's events get an "mcp_server" event for each server's
    start, failure or loss."""

    def __init__(self, ws, sessions_folder: str) -> None:
        self.ws, self.events = ws, ws.events
        self.log_path = os.path.join(sessions_folder, LOG_FILE)
        self.servers: list[Server] = []
        self.tools: dict[str, added_tools.AddedTool] = {}  # of the servers that started
        self.loop = self.thread = self.log = None

    def start(self, servers: list[Server], lesson_tools: dict) -> None:
        """Start each server (at once, each within the time-out), and gather the tools of
        those that started."""
        self.servers = servers
        ready = [s for s in servers if s.status == "configured" and self.usable(s)]
        if not ready:
            return
        try:
            import mcp  # noqa: F401 (here: only a configured server needs the SDK)
        except ImportError:
            for server in ready:
                self.fail(server, f"the mcp package is not installed ({INSTALL})", quiet=True)
            self.ws.events.notice(
                f"skipped the MCP servers ({', '.join(s.name for s in ready)}): the mcp package "
                f"is not installed for this Python; install it with {INSTALL}"
            )
            return
        import concurrent.futures

        self.open_loop()
        for server in ready:
            server.listed = concurrent.futures.Future()
            server.task = self.submit(self.keep(server))
        for server in ready:
            self.wait_for_start(server)
            if server.status == "started":
                self.add_tools(server, lesson_tools)

    def usable(self, server: Server) -> bool:
        """Whether the server's settings can be used (else one line, and it is skipped)."""
        settings = checked(server, self.ws.key)
        if isinstance(settings, str):
            self.fail(server, f"it {settings}", status="skipped")
            return False
        if not permissions.offered(self.ws, f"mcp__{server.name}"):
            self.fail(server, f"a deny rule names mcp__{server.name}", status="skipped")
            return False
        server.settings = settings
        return True

    def open_loop(self) -> None:
        import asyncio
        import logging
        import threading

        os.makedirs(os.path.dirname(self.log_path), exist_ok=True)
        self.log = files.open_record(self.log_path)  # owner-only, never through a link
        # The SDK logs each junk line a server writes, with a traceback: neither on the
        # terminal (Python's last-resort handler) nor, line after line, in the log.
        logger = logging.getLogger("mcp")
        logger.propagate = False
        logger.handlers = [logging.NullHandler()]
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="mcp", daemon=True)
        self.thread.start()

    def submit(self, coroutine):
        import asyncio

        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    async def keep(self, server: Server):
        """Open the server's transport and session, list its tools (server.listed), and keep
        them open until server.stop is set; every step bounded by the time-out."""
        import asyncio

        server.stop = asyncio.Event()
        try:
            await self.serve(server)
        except BaseException as error:
            if not server.listed.done():
                server.listed.set_exception(error)
            raise

    async def serve(self, server: Server):
        import asyncio

        import mcp

        settings, timeout = server.settings, self.ws.timeout
        async with contextlib.AsyncExitStack() as stack:
            if "url" in settings:
                from mcp.client.streamable_http import (
                    create_mcp_http_client,
                    streamable_http_client,
                )

                client = create_mcp_http_client(headers=settings["headers"])
                await stack.enter_async_context(client)
                transport = streamable_http_client(settings["url"], http_client=client)
                read, write = await stack.enter_async_context(transport)
            else:
                parameters = self.stdio_parameters(server, settings)
                with self.stderr_pipe(server) as errlog:  # closed once the server has its copy
                    transport = mcp.stdio_client(parameters, errlog=errlog)
                    read, write = await stack.enter_async_context(transport)
            session = mcp.ClientSession(read, write, read_timeout_seconds=timeout)
            await stack.enter_async_context(session)
            await asyncio.wait_for(session.initialize(), timeout)
            tools, cursor = [], None
            for _ in range(100):  # pages of tools: a server that never ends its list stops here
                params = mcp.types.PaginatedRequestParams(cursor=cursor) if cursor else None
                listed = await asyncio.wait_for(session.list_tools(params=params), timeout)
                tools += listed.tools
                cursor = listed.next_cursor
                if not cursor:
                    break
            server.session = session
            server.listed.set_result(tools)
            await server.stop.wait()

    def stderr_pipe(self, server: Server):
        """A pipe for the server's stderr, copied into the log by a thread of its own: the
        first LOG_LIMIT bytes, the rest read and dropped (a server that fills its stderr
        neither fills the disk nor blocks)."""
        import threading

        reader, writer = os.pipe()

        def copy() -> None:
            kept = 0
            self.write_log(f"--- the MCP server {server.name}'s stderr ---\n".encode())
            with open(reader, "rb") as pipe:
                while chunk := pipe.read1(65536):
                    if kept < LOG_LIMIT:
                        self.write_log(chunk[: LOG_LIMIT - kept])
                        kept += len(chunk)
                        if kept >= LOG_LIMIT:
                            cut = f"\n[the rest of {server.name}'s is left out]\n"
                            self.write_log(cut.encode())

        threading.Thread(target=copy, name=f"mcp {server.name} stderr", daemon=True).start()
        return open(writer, "w")

    def write_log(self, data: bytes) -> None:
        with contextlib.suppress(OSError, ValueError):  # a full disk, or closed: not the run's end
            self.log.write(data)
            self.log.flush()

    def stdio_parameters(self, server: Server, settings: dict):
        """How a stdio server is started: in the workdir, with the environment commands get
        (no secrets, no key) and its own env; a project's server inside the sandbox under
        --sandbox."""
        import mcp

        ws = self.ws
        command = [settings["command"], *settings["args"]]
        if server.project and ws.sandbox:
            command = processes.bwrap_command(ws.folder, *command, limits=ws.sandbox_limits,
                                              hidden=ws.private)  # fmt: skip
        env = {**processes.command_environment(ws), **settings["env"]}
        return mcp.StdioServerParameters(
            command=command[0], args=command[1:], env=env, cwd=ws.folder
        )

    def wait_for_start(self, server: Server) -> None:
        """Wait (at most the time-out, and a second) until the server listed its tools, or
        failed: its status set, and one line if it failed."""
        import concurrent.futures

        try:
            server.listed.result(self.ws.timeout + 1)
        except concurrent.futures.TimeoutError:
            self.fail(server, f"it did not answer within {self.ws.timeout:g} s")
            self.stop(server)
        except BaseException as error:
            self.fail(server, failure(error, self.ws.timeout))
        else:
            server.status = "started"

    def add_tools(self, server: Server, lesson_tools: dict) -> None:
        """The server's tools into self.tools, each as mcp__SERVER__TOOL; one whose name or
        schema cannot work, or that has the name of one the agent has, is left out with one
        line."""
        left_out = []
        for tool in server.listed.result():
            name = f"mcp__{server.name}__{tool.name}"
            if not TOOL_NAME.fullmatch(name):
                left_out.append(f"{visible(tool.name)} (its name cannot be a tool's)")
                continue
            if not permissions.offered(self.ws, name):
                left_out.append(f"{tool.name} (a deny rule names it)")
                continue
            schema = {"type": "function", "function": {
                "name": name, "description": tool.description or tool.title or tool.name,
                "parameters": tool.input_schema}}  # fmt: skip
            try:
                added_tools.add(self.tools, schema, self.function(server, tool.name, name),
                                f"the MCP server {server.name}",
                                {**lesson_tools, **self.ws.added_tools})  # fmt: skip
            except Exception as error:  # an AgentError naming what is wrong with it
                left_out.append(f"{tool.name} ({error})")
                continue
            server.tools.append(name)
        self.events.emit("mcp_server", name=server.name, file=server.file, project=server.project,
                         status="started", tools=server.tools, error=None)  # fmt: skip
        if left_out:
            self.ws.events.notice(f"MCP server {server.name}: left out {'; '.join(left_out)}")

    def function(self, server: Server, tool: str, name: str):
        """The function the agent calls for the tool: asks as run_shell asks, then calls it."""

        def call(ws, /, **arguments) -> str:
            shown = f"{name} {json.dumps(arguments, ensure_ascii=False)}"
            if server.status != "started":
                return gone(server)
            permissions.approve(ws, name, arguments, shown)
            return self.call(server, tool, arguments)

        return call

    def call(self, server: Server, tool: str, arguments: dict) -> str:
        """The tool's result as text, waited for at most the time-out; a server that does not
        answer in time, or has gone, is lost (with its tools)."""
        import concurrent.futures

        from mcp import MCPError
        from mcp.types import CONNECTION_CLOSED, REQUEST_TIMEOUT

        future = self.submit(server.session.call_tool(tool, arguments))
        try:
            result = future.result(self.ws.timeout + 1)
        except concurrent.futures.TimeoutError:
            future.cancel()
            why = f"it did not answer within {self.ws.timeout:g} s"
        except MCPError as error:
            if error.code not in (CONNECTION_CLOSED, REQUEST_TIMEOUT):
                return f"Error: {error.message}"  # the server refused the call: it goes on
            why = "it stopped" if error.code == CONNECTION_CLOSED else (
                f"it did not answer within {self.ws.timeout:g} s")  # fmt: skip
        except KeyboardInterrupt:
            future.cancel()
            raise
        except Exception as error:  # the connection broke in some other way
            why = f"{type(error).__name__}: {error}"
        else:
            return result_text(result)
        self.lose(server, why)
        return gone(server)

    def lose(self, server: Server, why: str) -> None:
        """A started server that failed: stopped, its tools gone, one line and an event."""
        self.fail(server, why, status="lost")
        self.stop(server)

    def fail(self, server: Server, why: str, status: str = "failed", quiet: bool = False) -> None:
        """A server that did not start ("failed"), was left out ("skipped") or stopped while
        in use ("lost"): its status, an event, and unless quiet one line."""
        server.status, server.problem = status, why
        line = f"MCP server {server.name} from {server.where} {OUTCOMES[status]}: {why}"
        self.events.emit("mcp_server", name=server.name, file=server.file, project=server.project,
                         status=status, tools=[], error=line)  # fmt: skip
        if not quiet:
            self.ws.events.notice(line)

    def stop(self, server: Server) -> None:
        if server.stop is not None:
            self.loop.call_soon_threadsafe(server.stop.set)
        if server.task is not None:
            server.task.cancel()  # one still starting

    def report(self) -> list[str]:
        """--mcp's lines: each server, where it is configured, whether it started (or why
        not), and its tools with the first line of their descriptions."""
        lines = []
        for server in self.servers:
            state = f"started, {len(server.tools)} tools" if server.status == "started" else (
                f"{server.status}: {server.problem}")  # fmt: skip
            lines.append(visible(f"{server.name} ({server.where}, {server.file}): {state}"))
            for name in server.tools:
                about = self.tools[name].schema["function"]["description"].strip()
                first = about.split("\n")[0]
                lines.append(f"  {name}  {one_line(first, 80)}")
        return lines

    def close(self) -> None:
        """Stop every server (each within STOP_SECONDS), the loop and its thread."""
        if not self.loop:
            return
        import concurrent.futures

        for server in self.servers:
            self.stop(server)
        tasks = [server.task for server in self.servers if server.task]
        concurrent.futures.wait(tasks, STOP_SECONDS)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(STOP_SECONDS)
        self.log.close()
        self.loop = None


def gone(server: Server) -> str:
    """What the model is told when it calls a tool of a server that is gone."""
    return (
        f"Error: the MCP server {server.name} is gone ({server.problem}), and its tools with "
        "it; go on without them"
    )


def failure(error: BaseException, timeout: float) -> str:
    """Why a server's start failed, in one line."""
    from mcp.types import REQUEST_TIMEOUT

    while isinstance(error, BaseExceptionGroup) and error.exceptions:  # anyio's task groups
        error = error.exceptions[0]
    if isinstance(error, TimeoutError) or getattr(error, "code", None) == REQUEST_TIMEOUT:
        return f"it did not answer within {timeout:g} s"
    text = getattr(error, "message", None) or str(error) or type(error).__name__
    return one_line(text, 200)


def result_text(result) -> str:
    """A call's result as the tool message: its text; structured content as JSON when it has
    no text; anything else (images, audio, resources) named with its type and size. A result
    the server marks as an error starts with "Error:"."""
    texts, others = [], []
    for block in result.content:
        kind = getattr(block, "type", "?")
        if kind == "text":
            texts.append(block.text)
        elif kind in ("image", "audio"):
            size = len(block.data) * 3 // 4  # base64
            others.append(f"[{kind}: {block.mime_type}, about {size:,} bytes]")
        elif kind == "resource":
            content = block.resource
            body = getattr(content, "text", None) or getattr(content, "blob", "")
            others.append(f"[resource: {content.uri}, {content.mime_type or 'no type'}, "
                          f"{len(body):,} characters]")  # fmt: skip
        elif kind == "resource_link":
            others.append(f"[resource link: {block.uri}, {block.mime_type or 'no type'}]")
        else:
            others.append(f"[{kind}]")
    if not texts and result.structured_content is not None:
        texts.append(json.dumps(result.structured_content, ensure_ascii=False))
    text = "\n".join(texts + others) or "(no content)"
    return f"Error: {text}" if result.is_error else text
