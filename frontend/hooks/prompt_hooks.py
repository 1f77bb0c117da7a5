"""What ``flush-tools`` and ``reminder`` compute (docs/hooks.md §nudges, §reminder), without click.

Both run on the agent's hot path (every prompt, every session start), so the ``thatch``
entry point calls ``run_flush_tools``/``run_reminder`` directly; the store, the embedder
client and git are imported only by the tiers that need them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from thatch.common.environment import default_db_path, queue_dir, snapshot_dir
from thatch.frontend import queue
from thatch.frontend.hooks import hookio
from thatch.frontend.hooks.hookio import Failures, run_hook

__all__ = [
    "CURSOR_PROMPT_ANSWER",
    "NUDGE_BUDGET",
    "fill_pending",
    "run_flush_tools",
    "run_reminder",
    "within_budget",
]

MIN_PROMPT_LEN = 10
PROMPT_EMBED_CHARS = 2000
PROMPT_EMBED_DEADLINE = 1.5
INFO_DEADLINE = 0.3
# The warm reminder's wait for a running thatch mcp (then the cold path runs): the server
# takes ~0.1 s at 5,000 memories, and the reminder's whole budget is 1 s.
HYGIENE_DEADLINE = 0.6
RECALL_LIMIT = 5
# What the prompt hook adds to the agent's context at most when the extraction nudge and
# the recall tier both apply (the extraction nudge alone is always printed whole).
NUDGE_BUDGET = 4000


def recall_threshold(env: Mapping[str, str]) -> float | None:
    """``THATCH_RECALL_THRESHOLD`` when a number in [0, 1] (else a warning), or None: the
    default of the model that embeds the prompt (docs/tools.md §thresholds)."""
    value = env.get("THATCH_RECALL_THRESHOLD")
    if not value:
        return None
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if not 0.0 <= number <= 1.0:  # also rejects nan
        from thatch.frontend.untrusted import quoted  # the environment's words: data

        hookio.warn_plain(
            f"ignoring THATCH_RECALL_THRESHOLD={quoted(value)}: not a number between 0 and 1"
        )
        return None
    return number


def model_recall_threshold(override: float | None, model: str) -> float:
    if override is not None:
        return override
    from thatch.frontend.thresholds import BUILT_IN, defaults_for

    return (defaults_for(model) or BUILT_IN).recall_nudge


def _cleanup_queue(command: str, directory: Path) -> None:
    """The queue's daily pass: its failure is said on stderr and costs the hook's text
    (the reminder, the nudge) nothing."""
    try:
        queue.cleanup(directory)
    except OSError as error:
        hookio.warn(command, f"queue cleanup failed: {error.strerror or error}")
    except Exception as error:
        hookio.report_failure(command, error)


def extraction_tier(
    directory: Path, session: str, host: str, project: str | None = None, *, bump: bool = True
) -> str | None:
    """The extraction nudge when the session has queued records that no extractor holds
    (bumps the count, unless ``bump`` is false: Cursor's is counted when a tool call hands
    it over). With ``project``, a carried-over queue of the project's ended sessions is
    adopted first."""
    from thatch.frontend.hooks.nudges import extraction_nudge

    if not session:
        return None
    if project:
        try:
            queue.adopt_carried(directory, session, project)
        except (queue.QueueError, OSError) as error:
            hookio.warn("flush-tools", f"carried-over queue not adopted: {error}")
    # Batches a busy lock made the session's hooks spill count too, when the lock is free.
    queue.merge_spilled(directory, session)
    records = queue.nudge_records(directory, session)
    if not records:
        return None
    if not usable_session_id(session):
        # The nudge would ask for tools that refuse this id (and echo all of it).
        hookio.warn("flush-tools", "session id refused by the extraction tools; no nudge")
        return None
    if bump:
        missed = queue.increment_count(directory, session)
    else:
        missed = queue.read_count(directory, session)
    return extraction_nudge(host, session, len(records), missed)


def queued_nudge(
    directory: Path, session: str, host: str, project: str, *, bump: bool = True
) -> str | None:
    """``extraction_tier``, a queue that cannot be used (a lock held past 2 s, a queue
    path that is no directory) said in one line: it costs the extraction nudge, never
    the recall tier's text."""
    try:
        return extraction_tier(directory, session, host, project, bump=bump)
    except queue.QueueError as error:
        hookio.warn("flush-tools", str(error))
    except OSError as error:
        hookio.warn("flush-tools", hookio.queue_problem(error))
    return None


def not_a_user_prompt(payload: Mapping[str, Any], prompt: str) -> bool:
    """A prompt event that no user typed: a background agent's completion (Claude Code's
    ``<task-notification>`` body), a child session's task prompt (opencode's plugin
    passes ``parent_session_id``) or thatch's own chat wake (Cursor submits a stop hook's
    ``followup_message`` as a prompt). It gets no nudge and no recall embedding."""
    if hookio.first_string(payload, "parent_session_id"):
        return True
    return prompt.lstrip().startswith(("<task-notification>", hookio.CHAT_WAKE_START))


def tools_declined(host: str, payload: Mapping[str, Any], env: Mapping[str, str]) -> bool:
    """Claude Code, and the user declined thatch's project server: its tools do not exist,
    so no nudge may point at them (docs/claude-code.md §declining-the-server). At most two
    small settings files read; other hosts read nothing."""
    if host != "claude":
        return False
    from thatch.frontend.setup.declined import claude_server_declined

    return claude_server_declined(hookio.project_dir(env, payload), env)


def usable_session_id(session: str) -> bool:
    """Whether ``get_extraction_payload`` and ``extraction_done`` accept ``session``.

    Their ``session_id`` parameters are checked by this same stdlib predicate, so the
    hook needs neither the tool specs nor the validator (~7 ms of imports per prompt).
    """
    from thatch.frontend.identifiers import session_id_problem

    return session_id_problem(session) is None


def recall_parts(
    prompt: str,
    env: Mapping[str, str],
    project: str,
    host: str,
    branch: str | None = None,
    failures: Failures | None = None,
) -> tuple[str | None, str | None]:
    """(recall nudge and engine blocks, the recall nudge alone) for a prompt of ≥ 10
    characters; (None, None) when the embedder is absent or nothing fires.

    ``branch`` (the project's checked-out branch): the nudge names only memories of that
    branch and unscoped ones, memory_recall's rule for its ``branch`` argument; None
    (not git, detached HEAD): every branch, as memory_recall without one."""
    prompt = prompt.strip()
    if len(prompt) < MIN_PROMPT_LEN:
        return None, None
    from thatch.frontend.hooks.nudges import recall_nudge
    from thatch.frontend.switches import is_on

    threshold = recall_threshold(env)
    stores = [project] if project == "global" else [project, "global"]
    text = prompt[:PROMPT_EMBED_CHARS]
    warm = warm_scan(text, env, stores, threshold, branch)
    engines = is_on(env, "engines")  # THATCH_ENGINES=off: no blocks (docs/tools.md §switches)
    if warm is not None:
        nudge = recall_nudge(host, warm[0], warm[2])
        return prompt_aware_text(nudge, warm[1] if engines else []), nudge
    embedded = embed_prompt(text, env)
    if embedded is None:
        return None, None
    vector, model = embedded
    from thatch.frontend.store.memory_store import Store
    from thatch.frontend.timefmt import utc_now

    # Maps a snapshot another process wrote, never writes one: the host waits for exit.
    store = Store.open(
        default_db_path(env),
        clock=utc_now,
        snapshot_dir=snapshot_dir(env),
        write_snapshots=False,
        build_indexes=False,  # nor for the lexical index's first build (schema m009)
    )
    try:
        matches = store.search(stores, vector, text=text, branch=branch, limit=RECALL_LIMIT)
        blocks = engine_blocks(store, stores, vector, env, model, failures) if engines else []
        cut = model_recall_threshold(threshold, model)
        from thatch.frontend.anchors.check import AnchorCheck
        from thatch.frontend.hooks.recall_scan import marked_labels

        kept = [match for match in matches if match.score >= cut]
        labels, changed = marked_labels(AnchorCheck(), store, kept)
    finally:
        store.close()
    nudge = recall_nudge(host, labels, changed)
    return prompt_aware_text(nudge, blocks), nudge


def engine_blocks(
    store: Any,
    stores: list[str],
    vector: Any,
    env: Mapping[str, str],
    model: str,
    failures: Failures | None = None,
) -> list[str]:
    """The prediction and behavior blocks (tier 2 b, c) from the prompt's one vector; a
    failure here costs only these blocks, never the recall nudge."""
    try:
        from thatch.frontend.engine_thresholds import auto_fire_thresholds
        from thatch.frontend.tools.engine_tools import prompt_blocks

        return prompt_blocks(store, stores, vector, auto_fire_thresholds(env, model))
    except Exception as error:
        (failures or Failures("flush-tools")).report(error)
        return []


def prompt_aware_text(recall: str | None, blocks: list[str]) -> str | None:
    """Tier 2's blocks that fired, in the order recall, predictions, behaviors."""
    return "\n\n".join([recall, *blocks] if recall else blocks) or None


def warm_scan(
    text: str,
    env: Mapping[str, str],
    stores: list[str],
    threshold: float | None,
    branch: str | None = None,
) -> tuple[list[str], list[str], dict[str, list[str]]] | None:
    """(recall labels, engine blocks, changed paths by label) from a running ``thatch mcp``
    for this database, from its one embedding of the prompt; None when none answers (the
    cold path runs instead)."""
    from thatch.frontend.engine_thresholds import auto_fire_overrides
    from thatch.frontend.hooks import recall_scan

    path = recall_scan.socket_path(default_db_path(env), env)
    if path is None:
        return None
    return recall_scan.request_marked_scan(
        path,
        text,
        stores,
        RECALL_LIMIT,
        threshold,
        auto_fire_overrides(env),
        branch=branch,
        deadline=PROMPT_EMBED_DEADLINE,
    )


def embed_prompt(text: str, env: Mapping[str, str]) -> tuple[Any, str] | None:
    """One query vector and the id of the model that made it, within the prompt deadline;
    None when the embedder cannot answer (a local one is then started in the background for
    the next prompt)."""
    from thatch.embedder.client.embedder_client import EmbedderClient
    from thatch.embedder.client.errors import ThatchEmbedderError
    from thatch.embedder.client.kind import Kind

    try:
        client = EmbedderClient(env=env, autostart=True)
    except ThatchEmbedderError:
        return None
    try:
        result = client.embed([text], Kind.QUERY, timeout=PROMPT_EMBED_DEADLINE, start_wait=0)
    except ThatchEmbedderError:
        return None
    finally:
        client.close()
    return result.vectors[0], result.model_id


def fitting_extra(extraction: str, prompt_aware: str | None, recall: str | None) -> str | None:
    """What of the recall tier's text fits NUDGE_BUDGET beside the extraction nudge:
    recall and the engines' blocks, else the recall nudge alone, else nothing."""
    for extra in (prompt_aware, recall):
        if extra and len(extraction) + 2 + len(extra) <= NUDGE_BUDGET:
            return extra
    return None


def within_budget(extraction: str, prompt_aware: str | None, recall: str | None) -> str:
    """The extraction nudge plus what of the recall tier's text fits NUDGE_BUDGET."""
    return joined(extraction, fitting_extra(extraction, prompt_aware, recall)) or extraction


def joined(*parts: str | None) -> str | None:
    """The texts that are there, as paragraphs; None when none is."""
    return "\n\n".join(part for part in parts if part) or None


def flush_text(
    payload: Mapping[str, Any], env: Mapping[str, str], host: str, failures: Failures
) -> str | None:
    """The nudges for this prompt: extraction (with the recall tier's text when both apply,
    within the size budget), else recall; None when neither has anything to say, for a
    prompt no user typed, and on failure (said to ``failures``, which says a line once).

    No fixed text on an ordinary prompt (issue 22): it would cost every later request its
    characters without telling the agent anything the instruction block does not.
    """
    return joined(*flush_parts(payload, env, host, failures))


def flush_parts(
    payload: Mapping[str, Any],
    env: Mapping[str, str],
    host: str,
    failures: Failures,
    *,
    bump: bool = True,
) -> tuple[str | None, str | None]:
    """``flush_text``'s two parts: the extraction nudge, and the recall tier's text that
    goes with it (all of it when there is no extraction nudge). ``bump`` as in
    ``extraction_tier``."""
    command = "flush-tools"
    prompt = hookio.first_string(payload, "prompt", "message", "text", "user_input", "input")
    if not_a_user_prompt(payload, prompt):
        return None, None
    try:
        directory = queue_dir(env)
        _cleanup_queue(command, directory)
        session = hookio.host_session(payload, host)
        project_path = hookio.project_dir(env, payload)
        extraction = queued_nudge(directory, session, host, str(project_path), bump=bump)
        found: tuple[str | None, str | None] = (None, None)
        if len(prompt.strip()) >= MIN_PROMPT_LEN:
            from thatch.frontend.project import current_branch
            from thatch.frontend.project_memo import remembered_store

            project = remembered_store(project_path, env)
            follow_branches(project, project_path, env, failures)
            branch = current_branch(project_path, env)
            try:
                found = recall_parts(prompt, env, project, host, branch, failures)
            except Exception as error:
                if not extraction:
                    raise
                failures.report(error)  # the extraction nudge still goes out
        if extraction:
            return extraction, fitting_extra(extraction, found[0], found[1])
        return None, found[0]
    except Exception as error:
        failures.report(error)
    return None, None


def follow_branches(
    project: str, directory: Path, env: Mapping[str, str], failures: Failures | None = None
) -> None:
    """Branch memory that follows git (docs/database.md §branch-lifecycle): stat calls while
    the refs are as at the last sync; a sync after they changed, over a connection of its
    own (not the memory Store: its imports alone cost ~60 ms). Failures cost only this."""
    try:
        import time

        from thatch.frontend.branch_sync import prompt_sync

        def open_records() -> Any:
            # Imported only when a sync runs: unchanged refs need no database.
            from thatch.frontend.store.branch_lifecycle import opened_records

            return opened_records(default_db_path(env))

        prompt_sync(project, directory, env, open_records, time.time_ns() // 10**6)
    except Exception as error:
        (failures or Failures("flush-tools")).report(error)


def prompt_nudges(payload: Mapping[str, Any], env: Mapping[str, str], host: str) -> str | None:
    """What the prompt hook has to say (extraction, relevant memories, engine blocks,
    unread chat), or None."""
    return joined(*prompt_parts(payload, env, host))


def prompt_parts(
    payload: Mapping[str, Any], env: Mapping[str, str], host: str, *, bump: bool = True
) -> tuple[str | None, str | None]:
    """``prompt_nudges`` as the extraction nudge and the rest (``flush_parts``)."""
    if tools_declined(host, payload, env):
        # Every line this hook prints (nudges, the chat line) points at tools the user
        # turned off; the session-start reminder already said so once.
        return None, None
    # Its steps each open the database: an unusable one is reported once, not by each.
    failures = Failures("flush-tools")
    extraction, rest = flush_parts(payload, env, host, failures, bump=bump)
    from thatch.frontend.hooks.chat_anchor import chat_line, with_chat_line

    line = chat_line("flush-tools", payload, env, host, always=False, failures=failures)
    return extraction, with_chat_line(rest, line)


def hold_for_cursor(payload: Mapping[str, Any], env: Mapping[str, str]) -> None:
    """Cursor's ``beforeSubmitPrompt`` cannot add context: the nudges wait for the
    session's next ``postToolUse`` (``queue.held_nudge``), the extraction nudge counted
    only when handed over. An earlier prompt's are dropped first, so a failure below
    leaves none that speaks of another prompt."""
    from thatch.frontend.queue import held_nudge

    session = hookio.host_session(payload, "cursor")
    if not session:
        return
    directory = queue_dir(env)
    try:
        held_nudge.drop(directory, session)
    except OSError as error:
        hookio.warn("flush-tools", hookio.queue_problem(error))
        return
    extraction, rest = prompt_parts(payload, env, "cursor", bump=False)
    if not (extraction or rest):
        return
    try:
        held_nudge.hold(directory, session, extraction, rest)
    except OSError as error:
        hookio.warn("flush-tools", hookio.queue_problem(error))


# What Cursor's beforeSubmitPrompt answers, whatever happened: the prompt goes on.
CURSOR_PROMPT_ANSWER = '{"continue": true}'


def run_flush_tools(as_json: bool, host: str | None) -> None:
    """Prompt hook: print the nudges that apply, or nothing; for Cursor, hold them for
    the session's next tool call and let the prompt through."""
    resolved = hookio.resolve_host(host, os.environ, "flush-tools")
    try:
        payload = hookio.read_payload("flush-tools")
    except Exception as error:  # a hook must never fail its host's turn
        hookio.report_failure("flush-tools", error)
        payload = {}
    # Claude Code's own event (its entry names no host) keeps Claude's answer even where
    # the environment says Cursor: Claude adds the text; Cursor would print it nowhere.
    if resolved == "cursor" and payload.get("hook_event_name") != "UserPromptSubmit":
        run_hook("flush-tools", lambda: hold_for_cursor(payload, os.environ))
        hookio.print_line(CURSOR_PROMPT_ANSWER)
        return
    run_hook("flush-tools", lambda: prompt_nudges(payload, os.environ, resolved), as_json)


def active_model(env: Mapping[str, str]) -> str:
    """The running embedder's model if it answers within 300 ms, else the configured id
    (and a local embedder is started in the background for the session's first prompt)."""
    from thatch.frontend.tools.active_model import active_model as resolve_active

    return resolve_active(env, timeout=INFO_DEADLINE, start_if_absent=True)


def fill_pending(env: Mapping[str, str]) -> None:
    """Embed up to 32 memories saved while the embedder was down, when one is serving now
    (never started or waited for here): the reminder then reports them as they are, not
    as "not embedded yet" until some search happens to fill them."""
    from thatch.frontend.tools.context import ToolContext

    # A hook: neither m009 nor any backfill (the session's start must not wait on them).
    with ToolContext.from_env(env, autostart=False, start_wait=0, build_indexes=False) as ctx:
        ctx.pending_fill.fill_opportunistically()


def warm_hygiene(project: str, directory: Path, env: Mapping[str, str]) -> tuple[str | None] | None:
    """The hygiene report from a running ``thatch mcp`` for this database (one-tuple), None
    when none answers: it holds numpy, grpc and the store already, which a fresh process
    spends most of its start importing."""
    from thatch.frontend.hooks import recall_scan

    path = recall_scan.socket_path(default_db_path(env), env)
    if path is None:
        return None
    duplicate = env.get("THATCH_DUPLICATE_THRESHOLD") or None
    return recall_scan.request_hygiene(
        path, project, str(directory), duplicate, deadline=HYGIENE_DEADLINE
    )


def cold_hygiene(project: str, directory: Path, env: Mapping[str, str]) -> str | None:
    """The hygiene report computed here: the store opened, the embedder asked for its model
    (and started in the background when absent), memories saved while it was down filled."""
    from thatch.frontend.store.memory_store import Store
    from thatch.frontend.timefmt import utc_now
    from thatch.frontend.tools.hygiene import hygiene_report

    model = active_model(env)
    store = Store.open(default_db_path(env), clock=utc_now, build_indexes=False)
    try:
        if store.pending_count(up_to=0):  # any at all: flat in the backlog's size
            fill_pending(env)
        return hygiene_report(store, project, directory, model, env=env)
    finally:
        store.close()


def sync_branches_at_start(
    project: str, directory: Path, env: Mapping[str, str], failures: Failures
) -> None:
    """Branch memory that follows git, once per session before the hygiene counts
    (docs/database.md §branch-lifecycle), over a connection of its own that is closed
    before any other opens; a failure costs only this."""
    try:
        import time

        from thatch.frontend.branch_sync import session_sync
        from thatch.frontend.store.branch_lifecycle import opened_records

        with opened_records(default_db_path(env)) as store:
            if store is not None:
                session_sync(store, project, directory, env, time.time_ns() // 10**6)
    except Exception as error:
        failures.report(error)


def reminder_output(payload: Mapping[str, Any], env: Mapping[str, str], host: str) -> str:
    """The session-start reminder, with the hygiene paragraph when the store needs it; in
    a Claude Code project that declined thatch's server, the one line saying so."""
    command = "reminder"
    if tools_declined(host, payload, env):
        # No store, no embedder start, no chat anchoring: the session cannot use them.
        from thatch.frontend.hooks.nudges import CLAUDE_DECLINED_NOTICE

        _cleanup_queue(command, queue_dir(env))
        return CLAUDE_DECLINED_NOTICE
    from thatch.frontend.hooks.reminder import reminder_text
    from thatch.frontend.project_memo import remembered_store

    directory = hookio.project_dir(env, payload)
    # Asks git when the checkout's config changed, and leaves the memo the prompts read.
    project = remembered_store(directory, env)
    _cleanup_queue(command, queue_dir(env))
    # The steps below each open the database: an unusable one is reported once, not by each.
    failures = Failures(command)
    report = None
    try:
        sync_branches_at_start(project, directory, env, failures)
        warm = warm_hygiene(project, directory, env)
        report = warm[0] if warm is not None else cold_hygiene(project, directory, env)
    except Exception as error:  # the reminder itself matters more than hygiene
        failures.report(error)
    from thatch.frontend.hooks.chat_anchor import chat_line, with_chat_line

    line = chat_line(
        command,
        payload,
        env,
        host,
        always=True,
        project=project,
        directory=directory,
        failures=failures,
    )
    return with_chat_line(reminder_text(project, host, report), line) or ""


def run_reminder(as_json: bool, host: str | None) -> None:
    """Session-start hook: remind the agent to load memories; report store hygiene."""

    def body() -> str | None:
        payload = hookio.read_payload("reminder", deadline=hookio.REMINDER_STDIN_DEADLINE)
        resolved = hookio.resolve_host(host, os.environ, "reminder")
        return reminder_output(payload, os.environ, resolved)

    run_hook("reminder", body, as_json)
