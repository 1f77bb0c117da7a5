"""Context footprint (issue 22 §2): what thatch adds to what the agent's host sends the model.

    python bench/footprint.py                      # the cheap part, then every host
    python bench/footprint.py --no-hosts           # the cheap part only (runs anywhere)
    python bench/footprint.py --hosts opencode     # or claude-2.1.197, claude-2.1.332

Cheap part (no host): the tool definitions as thatch's MCP server lists them (tools/list
through an in-process mcp Client over ``make_server``, bare names, compact JSON of name,
description and input schema), the instruction block ``thatch setup`` writes, and what the
real hook commands print for a new session (``reminder``) and an ordinary prompt
(``flush-tools``: nothing queued, nothing recalled), against a mock embedder.

Hosts: each real host (the pinned installs tests/hosts uses, cached under
~/.cache/thatch-tests/host-sets/, driven by its scripted model server) runs the same two
prompts in one session twice, in a project without thatch and in one after
``thatch setup``. The first request of each prompt is recorded and compared: "added" is
the difference in characters of the compact JSON request body, split into the thatch tool
definitions sent, the rest of the tools list, the instruction block, the session-start
reminder, the prompt hook's text (this prompt's, and earlier prompts' still in the
history) and the rest (host wrapping, deferred-tool lists, ids that differ per run).
The skills column counts the names and descriptions of the skills setup installs, where
the host lists them. Texts are counted as they appear in the JSON (escapes included), so
the parts add up; the budget line counts the block as written (no escapes).

Tokens are estimated as characters / 4 (no tokenizer of these models is at hand). Budgets
(issue 22): all tool definitions ≤ 6,000 characters, the instruction block ≤ 1,500.
Figures vary little between runs (the scripted model answers the same), but the host's own
prompt carries dates and paths: compare "added", not totals, across machines.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _common import embedder_running, print_table  # noqa: E402
from thatch.frontend.setup.block import BEGIN, END  # noqa: E402
from thatch.frontend.setup.instructions import BLOCK, POINTER_BLOCK  # noqa: E402

TOOLS_BUDGET = 6000
BLOCK_BUDGET = 1500
HOSTS = ("claude-2.1.197", "claude-2.1.332", "opencode")
PROMPTS = ("RUN1: how do widgets spin?", "RUN2: and what does the README say about them?")
THATCH_TOOL = re.compile(r"^(mcp__thatch__|thatch_)")
BLOCK_SPAN = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), re.S)


def skill_listings() -> list[tuple[str, str]]:
    """(name, description) of each skill setup installs: hosts list them in the prompt."""
    found = []
    for path in sorted((ROOT / "frontend" / "skills").glob("*/SKILL.md")):
        head = path.read_text().split("---")[1]
        about = re.search(r'^description: "(.*)"$', head, re.M)
        found.append((path.parent.name, json.loads(f'"{about.group(1)}"') if about else ""))
    return found


SKILLS = skill_listings()


def loadavg() -> str:
    try:
        return Path("/proc/loadavg").read_text().strip()
    except OSError:
        return "unknown"


def compact(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def in_json(text: str) -> int:
    """Characters ``text`` takes inside a JSON string (escapes included)."""
    return len(compact(text)) - 2 if text else 0


def tok(chars: int) -> str:
    return f"{chars:,} (~{round(chars / 4):,} tok)"


def within(chars: int, budget: int) -> str:
    return f"≤ {budget:,} {'ok' if chars <= budget else 'OVER'}"


# -- the cheap part ------------------------------------------------------------------------


def thatch_command() -> list[str]:
    script = Path(sys.executable).with_name("thatch")
    return [str(script)] if script.exists() else [sys.executable, "-m", "thatch.cli"]


@contextmanager
def quiet_world(embedder: str) -> Iterator[dict[str, str]]:
    """A throwaway HOME, database, queue and project (a git checkout) for thatch."""
    base = Path(tempfile.mkdtemp(prefix="thfp-"))
    try:
        project = base / "widgets"
        project.mkdir()
        home = base / "home"
        home.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("THATCH_", "HF_"))}
        env.update(
            HOME=str(home),
            XDG_CONFIG_HOME=str(home / ".config"),
            XDG_CACHE_HOME=str(home / ".cache"),
            THATCH_DB_PATH=str(base / "thatch.db"),
            THATCH_PROJECT_DIR=str(project),
            THATCH_EMBEDDER_ADDR=embedder,
            THATCH_MODEL="mock",
            HF_HUB_OFFLINE="1",
        )
        yield env
    finally:
        shutil.rmtree(base, ignore_errors=True)


async def listed_tools(env: Mapping[str, str]) -> list[dict[str, Any]]:
    """What ``tools/list`` serves, one compactable dict per tool (Anthropic's field names)."""
    from mcp.client import Client

    from thatch.frontend.mcp.server import make_server
    from thatch.frontend.tools.context import ToolContext

    with ToolContext.from_env(env, autostart=False) as ctx:
        async with Client(make_server(ctx), mode="legacy") as client:
            tools = (await client.list_tools()).tools
    return [
        {"name": t.name, "description": t.description, "input_schema": t.input_schema}
        for t in tools
    ]


def hook_text(argv: list[str], payload: Mapping[str, Any], env: Mapping[str, str]) -> str:
    """What a hook command prints into the agent's context (``additional_context`` of --json)."""
    done = subprocess.run(
        [*thatch_command(), *argv, "--json"],
        input=json.dumps(payload).encode(),
        env=dict(env),
        capture_output=True,
        timeout=60,
        check=False,
    )
    text = json.loads(done.stdout or b"{}").get("additional_context", "")
    return str(text)


def cheap_part() -> None:
    with embedder_running("mock") as (address, _), quiet_world(address) as env:
        tools = asyncio.run(listed_tools(env))
        chars = sum(len(compact(t)) for t in tools)
        rows = [
            [
                f"tool definitions ({len(tools)}, bare names)",
                tok(chars),
                within(chars, TOOLS_BUDGET),
            ],
        ]
        for host, prefix in (("claude", "mcp__thatch__"), ("opencode", "thatch_")):
            named = chars + len(prefix) * len(tools)
            rows.append([f"  with {host}'s {prefix} names", tok(named), ""])
        rows.append(
            ["instruction block (everything on)", tok(len(BLOCK)), within(len(BLOCK), BLOCK_BUDGET)]
        )
        rows.append(["pointer block (project, with --global)", tok(len(POINTER_BLOCK)), ""])
        session = {"session_id": "fp-1", "cwd": env["THATCH_PROJECT_DIR"]}
        for host in ("claude", "opencode"):
            text = hook_text(["reminder", "--host", host], session, env)
            rows.append([f"session-start reminder ({host}, once)", tok(len(text)), ""])
            text = hook_text(
                ["flush-tools", "--host", host], {**session, "prompt": PROMPTS[0]}, env
            )
            rows.append([f"ordinary prompt's hook text ({host}, each)", tok(len(text)), ""])
    print_table("From the code (no host)", ["what", "characters", "budget"], rows)


# -- the hosts -----------------------------------------------------------------------------


@dataclass
class Measure:
    """One recorded request, taken apart."""

    total: int
    tools: int
    thatch_tools: int
    thatch_tool_count: int
    thatch_tools_own: int  # names, descriptions and schemas only: the host's wrapping left out
    block: int
    block_raw: int
    skills: int
    reminder: int
    prompt_hook: int
    history_hooks: int


@dataclass
class HostRun:
    requests: list[Measure] = field(default_factory=list)  # the first request of each prompt


def context_text(hook_stdout: str) -> str:
    stdout = hook_stdout.strip()
    if stdout.startswith("{"):
        try:
            return str(json.loads(stdout).get("additional_context", ""))
        except (ValueError, AttributeError):
            return stdout
    return stdout


def own_chars(tool: dict[str, Any]) -> int:
    """A tool definition as the host sent it, less what the host wraps every tool in
    (opencode: ``{"type": "function", "function": …}`` and ``additionalProperties``)."""
    inner = tool.get("function", tool)
    schema = dict(inner.get("parameters") or inner.get("input_schema") or {})
    schema.pop("additionalProperties", None)
    schema.pop("$schema", None)
    return len(
        compact(
            {"name": inner.get("name"), "description": inner.get("description"), "schema": schema}
        )
    )


def measure(body: dict[str, Any], text: str, hooks: list[list[tuple[str, str]]]) -> Measure:
    """``hooks``: per prompt so far, (command, context text) of reminder and flush-tools."""
    tools = body.get("tools") or []
    ours = [
        t
        for t in tools
        if THATCH_TOOL.match(str(t.get("name") or t.get("function", {}).get("name", "")))
    ]
    found = BLOCK_SPAN.search(text)
    # Claude Code drops HTML comments from CLAUDE.md, the markers with them.
    inner = BLOCK[len(BEGIN) : -len(END)].strip("\n")
    block = found.group(0) if found else (inner if inner in text else "")

    def sent(pairs: list[tuple[str, str]], command: str) -> int:
        # As often as the host put it there: a resumed session may run the reminder again
        # with the same text, and the history holds the earlier one.
        texts = {t for c, t in pairs if c == command and t}
        return sum(in_json(t) * text.count(t) for t in texts)

    current = hooks[-1] if hooks else []
    earlier = [pair for prompt in hooks[:-1] for pair in prompt]
    this_prompt = sum(in_json(t) for c, t in current if c == "flush-tools" and t and t in text)
    return Measure(
        total=len(compact(body)),
        tools=len(compact(tools)),
        thatch_tools=sum(len(compact(t)) for t in ours),
        thatch_tool_count=len(ours),
        thatch_tools_own=sum(own_chars(t) for t in ours),
        block=in_json(block),
        block_raw=len(block),
        skills=sum(in_json(name) + in_json(about) for name, about in SKILLS if about in text),
        reminder=sent(current + earlier, "reminder"),
        prompt_hook=this_prompt,
        history_hooks=sent(current + earlier, "flush-tools") - this_prompt,
    )


def run_host(host: str, with_thatch: bool, embedder: str, dump: Path | None = None) -> HostRun:
    from tests.hosts import hostkit
    from tests.hosts.model_server import ModelRequest, ModelServer

    kind, _, version = host.partition("-")
    env = dict(os.environ)
    sets = hostkit.claude_hosts(version) if kind == "claude" else hostkit.BASE_HOSTS
    host_bin = hostkit.install_hosts(env, sets)
    server = ModelServer().start()
    base = Path(tempfile.mkdtemp(prefix="thfp-host-", dir="/tmp"))
    try:
        home = base / "home"
        home.mkdir()
        extra = {"THATCH_MODEL": "mock", "THATCH_EMBEDDER_ADDR": embedder}
        extra.update(hostkit.claude_env(server.url) if kind == "claude" else hostkit.opencode_env())
        sandbox = hostkit.make_sandbox(base, home, host_bin, extra)
        if with_thatch:
            done = sandbox.thatch("setup", f"--{kind}")
            if done.returncode != 0:
                raise SystemExit(f"thatch setup --{kind} failed: {done.stdout}{done.stderr}")
        if kind == "opencode":
            hostkit.opencode_config(sandbox, server.url, host_bin)
            config = Path(sandbox.env["XDG_CONFIG_HOME"]) / "opencode" / "opencode.json"
            settings = json.loads(config.read_text())
            settings.pop("mcp", None)  # the tests' second server is not part of this picture
            config.write_text(json.dumps(settings, indent=2))

        def main(request: ModelRequest) -> bool:
            return (
                "count_tokens" not in request.path
                and bool(request.tool_names())
                and any("RUN" in t for t in request.user_texts())
            )

        result = HostRun()
        hooks: list[list[tuple[str, str]]] = []
        session = ""
        for prompt in PROMPTS:
            server.run([])
            before = len(hostkit.hook_calls(sandbox.hook_log))
            if kind == "claude":
                argv = ["claude", "-p", prompt, "--permission-mode", "bypassPermissions"]
                argv += ["--output-format", "json"] + (["--resume", session] if session else [])
            else:
                argv = ["opencode", "run", "--format", "json", prompt]
                argv += ["--session", session] if session else []
            ran = hostkit.run_host(sandbox, argv)
            if ran.returncode != 0:
                raise SystemExit(f"{host} failed: {ran.stdout[-2000:]}{ran.stderr[-2000:]}")
            hostkit.wait_for_hooks(sandbox.hook_log)
            if not session:
                session = session_of(kind, ran.stdout)
            calls = hostkit.hook_calls(sandbox.hook_log)[before:]
            hooks.append(
                [
                    (c.command, context_text(c.stdout))
                    for c in calls
                    if c.command in ("reminder", "flush-tools")
                ]
            )
            firsts = [r for r in server.requests() if main(r)]
            if not firsts:
                raise SystemExit(f"{host}: no request of the agent recorded for {prompt!r}")
            result.requests.append(measure(firsts[0].body, firsts[0].all_text(), hooks))
            if dump is not None:
                dump.mkdir(parents=True, exist_ok=True)
                name = f"{host}-{'with' if with_thatch else 'without'}-{len(result.requests)}.json"
                (dump / name).write_text(json.dumps(firsts[0].body, indent=1, ensure_ascii=False))
        return result
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


def session_of(kind: str, stdout: str) -> str:
    if kind == "claude":
        return str(json.loads(stdout)["session_id"])
    from tests.hosts.hostkit import opencode_events

    ids = {e.get("sessionID") for e in opencode_events(stdout) if e.get("sessionID")}
    if len(ids) != 1:
        raise SystemExit(f"opencode ran {len(ids)} sessions, expected 1")
    return str(ids.pop())


def host_table(host: str, without: HostRun, with_thatch: HostRun) -> None:
    rows = []
    for index, (bare, ours) in enumerate(zip(without.requests, with_thatch.requests, strict=True)):
        added = ours.total - bare.total
        other_tools = (ours.tools - bare.tools) - ours.thatch_tools
        parts = ours.thatch_tools + other_tools + ours.block + ours.skills + ours.reminder
        parts += ours.prompt_hook + ours.history_hooks
        share = f"{100 * added / bare.total:+.0f} %" if bare.total else ""
        rows.append(
            [
                "first" if index == 0 else f"later ({index + 1})",
                f"{bare.total:,}",
                f"{tok(added)} {share}",
                f"{ours.thatch_tools:,} ({ours.thatch_tool_count})",
                f"{other_tools:,}",
                f"{ours.block:,}",
                f"{ours.skills:,}",
                f"{ours.reminder:,}",
                f"{ours.prompt_hook:,}",
                f"{ours.history_hooks:,}",
                f"{added - parts:,}",
            ]
        )
    header = [
        "request",
        "without thatch",
        "added by thatch",
        "thatch tool defs (n)",
        "other tools",
        "block",
        "skills",
        "reminder",
        "prompt hook",
        "earlier hooks",
        "rest",
    ]
    print_table(f"{host}: characters of the request body (tokens ≈ chars/4)", header, rows)
    tools = max(r.thatch_tools_own for r in with_thatch.requests)
    wrapped = max(r.thatch_tools for r in with_thatch.requests)
    block = max(r.block_raw for r in with_thatch.requests)
    print(
        f"\nbudgets: tool definitions (names, descriptions, schemas) {tools:,} chars"
        f" {within(tools, TOOLS_BUDGET)}, {wrapped:,} as the host wraps them"
        f" (0 = deferred behind tool search); instruction block {block:,} chars"
        f" {within(block, BLOCK_BUDGET)}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--no-hosts", action="store_true", help="only the part from the code")
    parser.add_argument(
        "--hosts", default=",".join(HOSTS), help=f"comma-separated, of {', '.join(HOSTS)}"
    )
    parser.add_argument("--dump", type=Path, help="write the recorded request bodies here")
    args = parser.parse_args(argv)
    print(f"load: {loadavg()}")
    cheap_part()
    if args.no_hosts:
        return 0
    hosts = [h.strip() for h in args.hosts.split(",") if h.strip()]
    unknown = [h for h in hosts if h not in HOSTS]
    if unknown:
        parser.error(f"unknown host(s) {', '.join(unknown)}; expected {', '.join(HOSTS)}")
    with embedder_running("mock") as (address, _):
        for host in hosts:
            runs: dict[bool, HostRun] = {}
            for with_thatch in (False, True):
                runs[with_thatch] = run_host(host, with_thatch, address, args.dump)
            host_table(host, runs[False], runs[True])
    print(f"\nload: {loadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
