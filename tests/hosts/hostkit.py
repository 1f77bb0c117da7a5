"""Installing and running the real agent hosts (Claude Code, opencode) for tests/hosts.

The hosts come from ``package.json`` + ``package-lock.json`` next to this file (the older
Claude Code thatch supports, and opencode) and in ``claude-latest/`` (the latest Claude
Code), each set installed into a cache directory keyed by its name and the hash of both
files, reused across runs. Each host run
gets the test's own HOME and XDG directories, the scripted model server's URL, and every
telemetry, update and feedback switch off. ``thatch`` on the host's PATH is a recording
shim: it saves each hook command's stdin (and stdout) under the run's hook log, then runs
the venv's real ``thatch``; ``thatch mcp`` and every other subcommand pass straight through.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
CLAUDE_VERSION = "2.1.197"
LATEST_CLAUDE_VERSION = "2.1.332"
CLAUDE_VERSIONS = (CLAUDE_VERSION, LATEST_CLAUDE_VERSION)
OPENCODE_VERSION = "1.18.33"
HOOK_COMMANDS = (
    "reminder",
    "buffer-batch",
    "buffer-tool",
    "flush-tools",
    "flush-predictions",
    "chat-notify",
    "extraction-status",
    "extraction-complete",
    "extraction-requeue",
    "session-end",
)
HOST_TIMEOUT = 180


class HostInstallError(RuntimeError):
    pass


@dataclass(frozen=True)
class HostSet:
    """One pinned npm install: its package directory and the versions ``--version`` says."""

    name: str
    directory: Path
    versions: tuple[tuple[str, str], ...]


BASE_HOSTS = HostSet("base", HERE, (("claude", CLAUDE_VERSION), ("opencode", OPENCODE_VERSION)))
LATEST_CLAUDE = HostSet(
    "claude-latest", HERE / "claude-latest", (("claude", LATEST_CLAUDE_VERSION),)
)


def claude_hosts(version: str) -> HostSet:
    return BASE_HOSTS if version == CLAUDE_VERSION else LATEST_CLAUDE


def lock_key(hosts: HostSet = BASE_HOSTS) -> str:
    digest = hashlib.sha256()
    for name in ("package.json", "package-lock.json"):
        digest.update((hosts.directory / name).read_bytes())
    return f"{hosts.name}-{digest.hexdigest()[:16]}"


def cache_root(env: Mapping[str, str]) -> Path:
    base = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".cache")
    # Not thatch-tests/hosts, where checkouts from before the host sets keep one install
    # and remove every other one they find.
    return Path(base).expanduser() / "thatch-tests" / "host-sets"


def install_hosts(env: Mapping[str, str], hosts: HostSet = BASE_HOSTS) -> Path:
    """The ``node_modules/.bin`` directory of pinned hosts, installed once per lockfile.

    ``npm ci`` refuses this lockfile: the registry here serves only the linux-x64 builds of
    opencode's optional platform packages, so the lockfile cannot list the others and ci
    calls it out of sync. ``npm install --no-save`` installs exactly the locked versions
    (integrity-checked) and skips the missing optional packages. The postinstall scripts
    only copy the native binary out of the platform package (no download).
    """
    root = cache_root(env)
    final = root / lock_key(hosts)
    bin_dir = final / "node_modules" / ".bin"
    if (final / "installed").is_file():
        return bin_dir
    npm = shutil.which("npm", path=env.get("PATH"))
    if npm is None:
        raise HostInstallError("npm is not on PATH: the real-host tests need node and npm")
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="install-", dir=root))
    try:
        for name in ("package.json", "package-lock.json"):
            shutil.copyfile(hosts.directory / name, work / name)
        result = subprocess.run(
            [npm, "install", "--no-save", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=work,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        if result.returncode != 0:
            tail = (result.stderr or result.stdout).strip().splitlines()[-15:]
            raise HostInstallError(
                f"npm install of {hosts.directory / 'package-lock.json'} failed "
                f"(exit {result.returncode}; is the npm registry reachable?):\n" + "\n".join(tail)
            )
        for tool, version in hosts.versions:
            exe = work / "node_modules" / ".bin" / tool
            probe = subprocess.run(
                [str(exe), "--version"],
                env={**env, "HOME": str(work)},
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            if version not in probe.stdout:
                raise HostInstallError(
                    f"{tool} --version said {probe.stdout.strip()!r} {probe.stderr.strip()!r}, "
                    f"expected {version}"
                )
        (work / "installed").write_text("ok\n")
        try:
            work.rename(final)
        except OSError:
            if not (final / "installed").is_file():
                raise
            # Another run installed the same lockfile meanwhile: keep theirs.
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
    for old in root.iterdir():
        # An install of an earlier lockfile of this set is ~600 MB nothing will use again.
        earlier = old.name.rsplit("-", 1)[0] == hosts.name and old != final
        if earlier and (old / "installed").is_file():
            shutil.rmtree(old, ignore_errors=True)
    return bin_dir


SHIM = """#!/bin/sh
# Recording shim (tests/hosts): thatch's hook commands get their stdin saved, then run.
case "$1" in
  {commands})
    f="$THATCH_TEST_HOOK_LOG/$(date +%s%N)-$$-$1"
    cat > "$f.in"
    {real} "$@" < "$f.in" > "$f.out" 2> "$f.err" &
    echo $! > "$f.pid"
    wait $!
    rc=$?
    echo $rc > "$f.rc"
    cat "$f.out"
    cat "$f.err" >&2
    exit $rc ;;
esac
exec {real} "$@"
"""


def write_shim(directory: Path) -> Path:
    real = Path(sys.executable).parent / "thatch"
    assert real.is_file(), real
    directory.mkdir(parents=True, exist_ok=True)
    shim = directory / "thatch"
    shim.write_text(SHIM.format(commands="|".join(HOOK_COMMANDS), real=_sh(str(real))))
    shim.chmod(0o755)
    return shim


def _sh(word: str) -> str:
    return "'" + word.replace("'", "'\\''") + "'"


@dataclass(frozen=True)
class HookCall:
    command: str  # reminder, buffer-batch, ...
    stdin: str
    stdout: str
    stderr: str

    def payload(self) -> dict[str, Any]:
        value = json.loads(self.stdin)
        assert isinstance(value, dict)
        return value


def unfinished_hooks(log_dir: Path) -> list[str]:
    """Hook commands that started and have not exited yet.

    A host may kill the shim past its budget (opencode's plugin sends SIGKILL after 3 s,
    which a loaded machine reaches): no ``.rc`` is written then, and the hook is over once
    neither the shim (its pid is in the name) nor the thatch it started (``.pid``) runs."""
    unfinished = []
    for path in log_dir.glob("*.in"):
        if path.with_suffix(".rc").exists():
            continue
        pids = [int(path.name.split("-", 2)[1])]
        child = path.with_suffix(".pid")
        text = child.read_text().strip() if child.exists() else ""
        if text.isdigit():
            pids.append(int(text))
        if any(_running(pid) for pid in pids):
            unfinished.append(path.name)
    return unfinished


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie nobody reaped has exited)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] not in ("Z", "X")


def wait_for_hooks(log_dir: Path, timeout: float = 30) -> None:
    """Until every hook the host started has exited: opencode's plugin does not wait for
    ``buffer-tool``, so one can still be writing the queue after ``opencode run`` ends."""
    from tests.support.polling import poll

    assert poll(lambda: not unfinished_hooks(log_dir), timeout), unfinished_hooks(log_dir)


def hook_calls(log_dir: Path) -> list[HookCall]:
    """Every hook command the host ran, in order."""
    out: list[HookCall] = []
    for path in sorted(log_dir.glob("*.in"), key=lambda p: int(p.name.split("-", 1)[0])):
        command = path.name.split("-", 2)[2][: -len(".in")]
        texts = []
        for suffix in (".out", ".err"):
            other = path.with_suffix(suffix)
            texts.append(other.read_text() if other.exists() else "")
        out.append(HookCall(command, path.read_text(), texts[0], texts[1]))
    return out


@dataclass
class Sandbox:
    """One test's host world: home, project, database, queue, hook log, PATH."""

    home: Path
    project: Path
    db_path: Path
    hook_log: Path
    env: dict[str, str]

    @property
    def queue_dir(self) -> Path:
        return Path(self.env["XDG_CACHE_HOME"]) / "thatch" / "queue"

    def thatch(self, *args: str) -> subprocess.CompletedProcess[str]:
        """The venv's thatch, with PATH finding it as ``thatch`` (what setup writes)."""
        real = Path(sys.executable).parent / "thatch"
        env = {**self.env, "PATH": f"{real.parent}{os.pathsep}{self.env['PATH']}"}
        return subprocess.run(
            [str(real), *args],
            cwd=self.project,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def queued(self) -> list[dict[str, Any]]:
        """Every record in every session's queue file."""
        records: list[dict[str, Any]] = []
        if not self.queue_dir.is_dir():
            return records
        for path in sorted(self.queue_dir.glob("*.jsonl")):
            for line in path.read_text().splitlines():
                if line.strip():
                    records.append(json.loads(line))
        return records

    def memories(self) -> list[dict[str, Any]]:
        """store, label, content, model and embedding size (bytes) of every memory."""
        conn = sqlite3.connect(f"file:{self.db_path}?mode=ro", uri=True)
        try:
            rows = conn.execute(
                "select store, label, content, model, length(embedding) from entries"
            ).fetchall()
        finally:
            conn.close()
        keys = ("store", "label", "content", "model", "embedding_bytes")
        return [dict(zip(keys, row, strict=True)) for row in rows]


def make_sandbox(tmp_path: Path, home: Path, host_bin: Path, extra: Mapping[str, str]) -> Sandbox:
    project = tmp_path / "src" / "widgets"
    project.mkdir(parents=True)
    hook_log = tmp_path / "hook-log"
    hook_log.mkdir()
    shim_dir = tmp_path / "shim"
    write_shim(shim_dir)
    venv_bin = Path(sys.executable).parent
    # The user's own thatch settings never leak in (module-scoped sandboxes are built
    # before the per-test isolation applies).
    env = {k: v for k, v in os.environ.items() if not k.startswith(("THATCH_", "HF_"))}
    env.pop("CLAUDE_CONFIG_DIR", None)
    env.pop("CLAUDE_PROJECT_DIR", None)
    env.pop("OPENCODE_CONFIG", None)
    env.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_CACHE_HOME=str(home / ".cache"),
        XDG_DATA_HOME=str(home / ".local" / "share"),
        XDG_STATE_HOME=str(home / ".local" / "state"),
        PATH=os.pathsep.join([str(shim_dir), str(venv_bin), str(host_bin), env.get("PATH", "")]),
        THATCH_TEST_HOOK_LOG=str(hook_log),
        THATCH_DB_PATH=str(tmp_path / "thatch.db"),
        NO_PROXY="127.0.0.1,localhost",
        no_proxy="127.0.0.1,localhost",
        GIT_AUTHOR_NAME="Test",
        GIT_AUTHOR_EMAIL="test@example.invalid",
        GIT_COMMITTER_NAME="Test",
        GIT_COMMITTER_EMAIL="test@example.invalid",
        GIT_CONFIG_NOSYSTEM="1",
        HF_HUB_OFFLINE="1",
        # opencode takes its working directory from PWD when it is set.
        PWD=str(project),
    )
    env.update(extra)
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY"):
        env.pop(name, None)
    run = {"cwd": project, "env": env, "check": True, "capture_output": True}
    subprocess.run(["git", "init", "-q", "-b", "main"], **run)  # type: ignore[call-overload]
    subprocess.run(  # type: ignore[call-overload]
        ["git", "remote", "add", "origin", "https://example.invalid/acme/widgets.git"], **run
    )
    (project / "widgets.py").write_text(
        '"""Widgets."""\n\n\ndef spin(n: int) -> int:\n'
        '    """n must be even."""\n    return n // 2\n'
    )
    (project / "README.md").write_text("# widgets\n\nSpin widgets.\n")
    subprocess.run(["git", "add", "."], **run)  # type: ignore[call-overload]
    subprocess.run(["git", "commit", "-q", "-m", "widgets"], **run)  # type: ignore[call-overload]
    return Sandbox(home, project, Path(env["THATCH_DB_PATH"]), hook_log, env)


def claude_env(model_url: str) -> dict[str, str]:
    return {
        "ANTHROPIC_BASE_URL": model_url,
        "ANTHROPIC_API_KEY": "test",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_BUG_COMMAND": "1",
        "CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY": "1",
        "CLAUDE_CODE_DISABLE_TERMINAL_TITLE": "1",
        # Claude Code refuses bypassPermissions as root unless it is told it is sandboxed
        # (CI containers run as root); the test's HOME and project are throwaway.
        "IS_SANDBOX": "1",
        # `claude -p` connects MCP servers in the background by default and snapshots its
        # tools when the first request goes out: a slow `thatch mcp` start (a loaded
        # machine) leaves the first turn without thatch's tools ("No such tool available",
        # anthropics/claude-code#74926). Scripted turns call them at once: wait for them.
        "MCP_CONNECTION_NONBLOCKING": "0",
    }


def opencode_env() -> dict[str, str]:
    return {
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
        "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
        "OPENCODE_DISABLE_SHARE": "1",
        "OPENCODE_DISABLE_CLAUDE_CODE": "1",
        "OPENCODE_DISABLE_EXTERNAL_SKILLS": "1",
        "OPENCODE_DISABLE_TERMINAL_TITLE": "1",
        "OPENCODE_DISABLE_EMBEDDED_WEB_UI": "1",
    }


OPENCODE_PLUGIN_DEP = {"@opencode-ai/plugin": OPENCODE_VERSION}


def opencode_config(sandbox: Sandbox, model_url: str, host_bin: Path) -> None:
    """The scripted provider in the user's opencode config, and its dependency installs.

    opencode npm-installs ``@opencode-ai/plugin`` into every config directory (the user's
    and the project's ``.opencode``) at start unless ``node_modules`` exists and the
    directory's package-lock.json lists what package.json does: both get the copy our
    lockfile installed, so the host never reaches the registry at run time.
    """
    config_dir = Path(sandbox.env["XDG_CONFIG_HOME"]) / "opencode"
    config_dir.mkdir(parents=True, exist_ok=True)
    provider = {
        "npm": "@ai-sdk/openai-compatible",
        "name": "Scripted",
        "options": {"baseURL": f"{model_url}/v1", "apiKey": "test"},
        "models": {"test-model": {"name": "Scripted test model", "tool_call": True}},
    }
    config = {
        "$schema": "https://opencode.ai/config.json",
        "provider": {"scripted": provider},
        "model": "scripted/test-model",
        "small_model": "scripted/test-model",
        "autoupdate": False,
        "share": "disabled",
        # A second MCP server whose tools are not thatch's (they get queued): thatch's own
        # server under another name.
        "mcp": {
            "other": {
                "type": "local",
                "command": ["thatch", "mcp"],
                "enabled": True,
                "environment": {"THATCH_HOST": "opencode"},
            }
        },
    }
    (config_dir / "opencode.json").write_text(json.dumps(config, indent=2))
    node_modules = host_bin.parent
    for directory in (config_dir, sandbox.project / ".opencode"):
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "package.json").write_text(json.dumps({"dependencies": OPENCODE_PLUGIN_DEP}))
        lock = {"lockfileVersion": 3, "packages": {"": {"dependencies": OPENCODE_PLUGIN_DEP}}}
        (directory / "package-lock.json").write_text(json.dumps(lock))
        (directory / "node_modules").symlink_to(node_modules, target_is_directory=True)


def opencode_events(stdout: str) -> list[dict[str, Any]]:
    """``opencode run --format json`` output: one JSON event per line."""
    events = []
    for line in stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            events.append(json.loads(line))
    return events


def run_host(sandbox: Sandbox, argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        cwd=sandbox.project,
        env=sandbox.env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=HOST_TIMEOUT,
        check=False,
    )
