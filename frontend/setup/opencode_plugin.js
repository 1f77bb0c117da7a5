import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";

const THATCH_BIN = __BIN__;
// The features this project switched off, passed to every hook command (thatch setup).
const OFF_ARGS = __OFF_ARGS__;
// The agent waits on chat.message; never hold it longer than this.
const BUDGET_MS = 3000;
// Asking opencode about a session is an in-process call; give up on it well within budget.
const LOOKUP_MS = 800;
const MARK = "thatch";

// Older opencode loaders call every export, and this file exports the plugin twice (named
// and default): the second call with the same input object must not register hooks again.
const initialised = new WeakSet();

function runThatch(args, payload, timeoutMs, collect) {
  return new Promise((resolve) => {
    let out = "";
    let done = false;
    let child = null;
    const finish = () => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      resolve(out);
    };
    const timer = setTimeout(() => {
      try {
        if (child) child.kill("SIGKILL");
      } catch {}
      finish();
    }, Math.max(0, timeoutMs));
    try {
      child = spawn(THATCH_BIN, [...args, ...OFF_ARGS], {
        stdio: ["pipe", collect ? "pipe" : "ignore", "ignore"],
      });
      child.on("error", finish);
      child.on("close", finish);
      if (collect) child.stdout.on("data", (chunk) => { out += chunk; });
      child.stdin.on("error", () => {});
      child.stdin.end(JSON.stringify(payload));
    } catch {
      finish();
    }
  });
}

// The first prompt would otherwise wait for the embedder the reminder starts: start it at
// boot, detached, and never wait for it.
function startEmbedder() {
  try {
    const child = spawn(THATCH_BIN, ["embedder", "start", "--wait", "0"], {
      stdio: "ignore",
      detached: true,
    });
    child.on("error", () => {});
    child.unref();
  } catch {}
}

function contextOf(stdout) {
  try {
    const lines = String(stdout).split("\n").filter((line) => line.trim());
    if (!lines.length) return "";
    const value = JSON.parse(lines[lines.length - 1]);
    const text = value && value.additional_context;
    return typeof text === "string" ? text.trim() : "";
  } catch {
    return "";
  }
}

function withTimeout(promise, ms) {
  let timer;
  const expired = new Promise((resolve) => { timer = setTimeout(() => resolve(undefined), ms); });
  return Promise.race([Promise.resolve(promise).catch(() => undefined), expired]).finally(
    () => clearTimeout(timer),
  );
}

// opencode sorts a message's parts by id: "prt_" + 12 hex digits of the low 48 bits of
// (ms * 4096 + counter) + 14 base62 characters (packages/opencode/src/id/id.ts). Ours must
// sort after the user's text, so it is also kept above every id already in the message.
const ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
const MASK48 = (1n << 48n) - 1n;
let lastStamp = 0n;

function partId(existing) {
  let stamp = ((BigInt(Date.now()) * 4096n) + 1n) & MASK48;
  for (const part of existing) {
    const match = /^prt_([0-9a-f]{12})/.exec(typeof part?.id === "string" ? part.id : "");
    if (match) {
      const seen = BigInt("0x" + match[1]);
      if (seen >= stamp) stamp = seen + 1n;
    }
  }
  if (stamp <= lastStamp) stamp = lastStamp + 1n;
  stamp &= MASK48;
  lastStamp = stamp;
  const bytes = randomBytes(14);
  let random = "";
  for (let i = 0; i < 14; i++) random += ALPHABET[bytes[i] % 62];
  return `prt_${stamp.toString(16).padStart(12, "0")}${random}`;
}

function dataOf(response) {
  return response && typeof response === "object" && "data" in response ? response.data : response;
}

const WAKE_START = "[thatch] System notification, not user input:";

function isWake(part) {
  if (part.metadata && part.metadata[MARK] === "chat-wake") return true;
  return typeof part.text === "string" && part.text.startsWith(WAKE_START);
}

function isThatchPart(part) {
  if (!part || part.type !== "text" || !part.synthetic) return false;
  if (part.metadata && part.metadata[MARK]) return true;
  return typeof part.text === "string" && part.text.startsWith("[thatch]");
}

// Direct extraction (docs/hooks.md §opencode): a child session of this title fetches the
// idle session's queued calls, writes memories and acknowledges.
const EXTRACTION_TITLE = "thatch-extraction";
// A compaction that never reported its end must not silence a session for good.
const COMPACTION_MS = 10 * 60 * 1000;
// After a child that failed, was deleted or never fetched, the session's idles start no
// child for this long (the nudge takes over): a broken provider or a model that ignores
// the prompt must not cost a model call on every idle.
const BACKOFF_MS = 10 * 60 * 1000;

function lastJson(stdout) {
  try {
    const lines = String(stdout).split("\n").filter((line) => line.trim());
    if (!lines.length) return null;
    const value = JSON.parse(lines[lines.length - 1]);
    return value && typeof value === "object" && !Array.isArray(value) ? value : null;
  } catch {
    return null;
  }
}

// A client call's failure: a thrown error, or (the SDK does not throw by default) an
// answer carrying `error`.
function failed(response) {
  return !response || (typeof response === "object" && response.error !== undefined);
}

function extractionPrompt(sessionID, pending) {
  const id = JSON.stringify(sessionID);
  const calls = pending === 1 ? "1 tool interaction is" : `${pending} tool interactions are`;
  return (
    `[thatch] ${calls} queued for fact extraction from session ${id}. ` +
    `Call thatch_get_extraction_payload with session_id ${id} to get them, apply the ` +
    "thatch-fact-extractor skill to them (save durable facts with thatch_memory_remember), " +
    `then call thatch_extraction_done with session_id ${id} even if nothing was worth ` +
    "saving. Your final message is exactly: Extraction complete."
  );
}

function textOf(output) {
  const blocks = Array.isArray(output?.content) ? output.content : [];
  const texts = blocks.filter((b) => b && b.type === "text").map((b) => String(b.text ?? ""));
  if (texts.length) return texts.join("\n");
  return typeof output?.output === "string" ? output.output : "";
}

// The toast names what the child wrote; labels are the agent's words, so they are quoted.
function toastMessage(saved, forgotten) {
  const shown = saved.slice(0, 3).map((label) => JSON.stringify(label.slice(0, 60)));
  const more = saved.length > 3 ? `, +${saved.length - 3} more` : "";
  const parts = [];
  if (saved.length) {
    const noun = saved.length === 1 ? "memory" : "memories";
    parts.push(`saved ${saved.length} ${noun} (${shown.join(", ")}${more})`);
  }
  if (forgotten) parts.push(`forgot ${forgotten}`);
  return `Extraction ${parts.join(", ")}.`;
}

export const ThatchPlugin = async (input) => {
  if (input && typeof input === "object") {
    if (initialised.has(input)) return {};
    initialised.add(input);
  }
  const client = input?.client;
  // Per session: its parent id ("" for a top-level session), and whether it was reminded.
  const parents = new Map();
  const reminded = new Set();
  // Direct extraction: parent id -> its one running job {child, saved, forgotten, ...};
  // child id -> parent id.
  const jobs = new Map();
  const childOf = new Map();
  // Sessions whose idle is being handled (session.idle and session.status idle both
  // arrive for one transition), sessions known busy, sessions compacting (since when).
  const idling = new Set();
  const busy = new Set();
  const compacting = new Map();
  const backoff = new Map();
  // callID -> when the call started: opencode runs a step's calls in parallel, and a save
  // must not consume the siblings whose results its agent had not seen (docs/hooks.md).
  const started = new Map();
  let disposed = false;
  startEmbedder();

  // A session's parent, or "" when it has none; null when opencode did not say (retried).
  function parentOf(sessionID) {
    if (!sessionID || !client?.session?.get) return Promise.resolve(null);
    let known = parents.get(sessionID);
    if (!known) {
      known = withTimeout(
        client.session.get({ path: { id: sessionID }, sessionID }),
        LOOKUP_MS,
      ).then((response) => {
        const session = dataOf(response);
        if (!session || typeof session !== "object" || !session.id) {
          parents.delete(sessionID);
          return null;
        }
        return typeof session.parentID === "string" ? session.parentID : "";
      });
      parents.set(sessionID, known);
    }
    return known;
  }

  // Whether an earlier message of the session (maybe from another opencode process, as
  // with `opencode run --session`) already carries thatch's part; null when unknown.
  async function remindedBefore(sessionID) {
    if (!client?.session?.messages) return null;
    const response = await withTimeout(
      client.session.messages({ path: { id: sessionID }, sessionID }),
      LOOKUP_MS,
    );
    const messages = dataOf(response);
    if (!Array.isArray(messages)) return null;
    return messages.some((m) => Array.isArray(m?.parts) && m.parts.some(isThatchPart));
  }

  function isCompacting(sessionID) {
    const since = compacting.get(sessionID);
    if (since === undefined) return false;
    if (Date.now() - since < COMPACTION_MS) return true;
    compacting.delete(sessionID);
    return false;
  }

  // Busy by the events seen, or by opencode's own status map (absent means idle).
  async function isBusy(sessionID) {
    if (busy.has(sessionID) || isCompacting(sessionID)) return true;
    if (!client?.session?.status) return false;
    const statuses = dataOf(await withTimeout(client.session.status({}), LOOKUP_MS));
    const type = statuses && typeof statuses === "object" ? statuses[sessionID]?.type : undefined;
    return type === "busy" || type === "retry" || busy.has(sessionID);
  }

  function deleteSession(id) {
    if (!client?.session?.delete) return Promise.resolve();
    return withTimeout(client.session.delete({ path: { id }, sessionID: id }), BUDGET_MS);
  }

  async function startExtraction(parent) {
    if (jobs.has(parent) || disposed || !client?.session?.create) return;
    if (Date.now() - (backoff.get(parent) ?? -Infinity) < BACKOFF_MS) return;
    backoff.delete(parent);
    const job = {
      child: "",
      started: false,
      done: false,
      fetched: false,
      saved: [],
      forgotten: 0,
    };
    jobs.set(parent, job);  // before any await: a second idle must find it
    try {
      const status = lastJson(
        await runThatch(
          ["extraction-status", "--host", "opencode"],
          { session_id: parent },
          BUDGET_MS,
          true,
        ),
      );
      const pending = Number.isInteger(status?.pending) ? status.pending : 0;
      // accepted: an extractor (a task sub-agent, another process) holds the snapshot.
      if (pending < 1 || status.accepted !== false || disposed) {
        jobs.delete(parent);
        return;
      }
      const created = await withTimeout(
        client.session.create({
          body: { parentID: parent, title: EXTRACTION_TITLE },
          parentID: parent,
          title: EXTRACTION_TITLE,
        }),
        BUDGET_MS,
      );
      const child = dataOf(created)?.id;
      if (typeof child !== "string" || !child) {
        jobs.delete(parent);
        return;
      }
      job.child = child;
      childOf.set(child, parent);
      parents.set(child, Promise.resolve(parent));
      const parts = [{ type: "text", text: extractionPrompt(parent, pending) }];
      const request = { path: { id: child }, body: { parts }, sessionID: child, parts };
      if (client.session.promptAsync) {
        const accepted = await withTimeout(client.session.promptAsync(request), BUDGET_MS);
        if (failed(accepted)) await finishChild(child, "error");
      } else if (client.session.prompt) {
        // The blocking call answers when the child is done: that is its end too.
        job.started = true;
        Promise.resolve(client.session.prompt(request))
          .then((answer) => {
            const error = failed(answer) || dataOf(answer)?.info?.error;
            return finishChild(child, error ? "error" : "idle");
          })
          .catch(() => finishChild(child, "error"));
      } else {
        await finishChild(child, "error");
      }
    } catch {
      if (!job.child) jobs.delete(parent);
      else await finishChild(job.child, "error");
    }
  }

  // The child ended: idle → complete the snapshot it was handed (its no-save end too),
  // toast what it wrote; error or deletion → requeue. Then the child session goes.
  async function finishChild(child, outcome) {
    const parent = childOf.get(child);
    const job = parent === undefined ? undefined : jobs.get(parent);
    if (!job || job.child !== child || job.done) return;
    if (outcome === "idle" && !job.started) return;  // not begun: an idle from before
    job.done = true;
    childOf.delete(child);
    if (outcome !== "idle" || !job.fetched) backoff.set(parent, Date.now());
    try {
      const command = outcome === "idle" ? "extraction-complete" : "extraction-requeue";
      await runThatch([command, "--host", "opencode"], { session_id: parent }, BUDGET_MS, false);
      if (outcome === "idle" && (job.saved.length || job.forgotten) && client?.tui?.showToast) {
        const body = {
          title: "thatch",
          message: toastMessage(job.saved, job.forgotten),
          variant: "success",
        };
        await withTimeout(client.tui.showToast({ body, ...body }), LOOKUP_MS);
      }
    } finally {
      // Only now may the next idle start another child.
      jobs.delete(parent);
      if (outcome !== "deleted") await deleteSession(child);
    }
  }

  // Chat (docs/chat.md §6): chat-notify decides (15-minute window, 6 wakes an hour) and
  // prints the pointer; it is delivered as a new message only while the session is idle.
  async function wakeForChat(sessionID) {
    if (disposed) return;
    const answer = lastJson(
      await runThatch(
        ["chat-notify", "--host", "opencode"],
        { session_id: sessionID },
        BUDGET_MS,
        true,
      ),
    );
    const pointer = answer?.decision === "block" ? answer.reason : "";
    if (typeof pointer !== "string" || !pointer.startsWith(WAKE_START)) return;
    // A prompt that arrived meanwhile carries the unread count already (flush-tools).
    if (disposed || (await isBusy(sessionID))) return;
    const send = client?.session?.promptAsync ? "promptAsync" : "prompt";
    if (!client?.session?.[send]) return;
    const parts = [{ type: "text", text: pointer, metadata: { [MARK]: "chat-wake" } }];
    const request = { path: { id: sessionID }, body: { parts }, sessionID, parts };
    const sent = client.session[send](request);
    if (send === "promptAsync") await withTimeout(sent, BUDGET_MS);
    else Promise.resolve(sent).catch(() => {});
  }

  async function onIdle(sessionID) {
    busy.delete(sessionID);
    if (childOf.has(sessionID)) {
      await finishChild(sessionID, "idle");
      return;
    }
    if (idling.has(sessionID) || disposed) return;
    idling.add(sessionID);
    try {
      // Never from a child session (a task sub-agent or our extraction child).
      if ((await parentOf(sessionID)) !== "") return;
      // A prompt or a compaction arrived since: its own idle comes later.
      if (await isBusy(sessionID)) return;
      await Promise.all([startExtraction(sessionID), wakeForChat(sessionID)]);
    } finally {
      idling.delete(sessionID);
    }
  }

  async function onEvent(event) {
    const type = event?.type;
    const props = event?.properties ?? {};
    const info = props.info;
    if ((type === "session.created" || type === "session.updated") && info?.id) {
      parents.set(info.id, Promise.resolve(typeof info.parentID === "string" ? info.parentID : ""));
      return;
    }
    if (type === "session.status") {
      const id = props.sessionID;
      const status = props.status?.type;
      if (!id) return;
      if (status === "idle") return onIdle(id);
      busy.add(id);
      const job = jobs.get(childOf.get(id));
      if (job) job.started = true;
      return;
    }
    if (type === "session.idle" && props.sessionID) return onIdle(props.sessionID);
    if (type === "session.compacted" && props.sessionID) {
      compacting.delete(props.sessionID);
      return;
    }
    if (type === "session.error" && props.sessionID) {
      compacting.delete(props.sessionID);
      if (childOf.has(props.sessionID)) return finishChild(props.sessionID, "error");
      return;
    }
    if (type === "session.deleted" && info?.id) {
      if (childOf.has(info.id)) await finishChild(info.id, "deleted");
      parents.delete(info.id);
      reminded.delete(info.id);
      busy.delete(info.id);
      compacting.delete(info.id);
    }
  }

  // The extraction child's own calls: its saves feed the toast; nothing of it is queued
  // (extracting the extractor would feed extraction back into itself).
  function noteChildCall(parent, hookInput, output) {
    const job = jobs.get(parent);
    if (!job) return;
    job.started = true;
    const tool = String(hookInput?.tool ?? "");
    if (output?.isError === true) return;
    const text = textOf(output);
    if (tool.endsWith("get_extraction_payload") && text.startsWith('{"interactions"')) {
      job.fetched = true;
    } else if (tool.endsWith("memory_remember") && text.startsWith("[saved]")) {
      const label = hookInput?.args?.label;
      job.saved.push(typeof label === "string" ? label : "");
    } else if (tool.endsWith("memory_forget") && text.startsWith("[forgotten]")) {
      job.forgotten += 1;
    }
  }

  return {
    // opencode does not await event hooks; the returned promise only serves tests.
    event: async ({ event } = {}) => {
      try {
        await onEvent(event);
      } catch {}
    },
    "experimental.session.compacting": async (hookInput) => {
      try {
        if (hookInput?.sessionID) compacting.set(hookInput.sessionID, Date.now());
      } catch {}
    },
    // opencode awaits dispose when it shuts down: an extraction child dies with it, so
    // its snapshot is pending again at once (else after the accepted state's expiry).
    dispose: async () => {
      disposed = true;
      const running = [...childOf.keys()];
      await Promise.all(running.map((child) => finishChild(child, "error")));
    },
    "tool.execute.before": async (hookInput) => {
      try {
        if (!hookInput?.callID) return;
        if (started.size >= 1000) started.clear(); // calls that never ended: bounded
        started.set(hookInput.callID, Date.now());
      } catch {}
    },
    "tool.execute.after": async (hookInput, output) => {
      try {
        const sessionID = hookInput?.sessionID;
        const startedAt = started.get(hookInput?.callID);
        started.delete(hookInput?.callID);
        const extracting = childOf.get(sessionID);
        if (extracting !== undefined) {
          noteChildCall(extracting, hookInput, output);
          return;
        }
        const payload = {
          session_id: sessionID,
          tool_name: hookInput?.tool,
          tool_input: hookInput?.args ?? {},
          tool_use_id: hookInput?.callID,
          // Built-in tools answer with `output`; MCP tools with `content` blocks and `isError`.
          tool_response: output?.output ?? output?.content ?? "",
          is_error: output?.isError === true,
          started_at: startedAt,
          ended_at: Date.now(),
        };
        // Deliberately not awaited: buffering must never slow the agent down.
        parentOf(sessionID)
          .then((parent) => {
            // A sub-agent's calls are queued under its own session, tagged with the parent.
            if (parent) payload.parent_session_id = parent;
          })
          .catch(() => {})
          .finally(() => {
            runThatch(["buffer-tool", "--host", "opencode"], payload, BUDGET_MS, false);
          });
      } catch {}
    },
    "chat.message": async (hookInput, output) => {
      try {
        const parts = Array.isArray(output?.parts) ? output.parts : null;
        if (!parts) return;
        if (parts.some((part) => part && part.type === "compaction")) return;
        const sessionID = hookInput?.sessionID ?? output?.message?.sessionID ?? "";
        // A prompt is coming: the session is busy until its next idle.
        if (sessionID) busy.add(sessionID);
        // Our own chat wake is no user prompt: no reminder, no nudge.
        const texts = parts.filter((part) => part && part.type === "text");
        if (texts.length && texts.every(isWake)) return;
        if (isCompacting(sessionID)) return;
        const prompt = parts
          .filter((part) => part && part.type === "text" && !part.synthetic)
          .map((part) => String(part.text ?? ""))
          .join(" ");
        const deadline = Date.now() + BUDGET_MS;
        const [parent, before] = await Promise.all([
          parentOf(sessionID),
          reminded.has(sessionID) ? true : remindedBefore(sessionID),
        ]);
        // Sub-agent (task) sessions work for a parent that got the reminder and nudges.
        if (parent) return;
        const remind = !reminded.has(sessionID) && before !== true;
        reminded.add(sessionID);
        const left = () => deadline - Date.now();
        const [reminder, nudge] = await Promise.all([
          remind
            ? runThatch(
                ["reminder", "--json", "--host", "opencode"],
                { session_id: sessionID },
                left(),
                true,
              )
            : "",
          runThatch(
            ["flush-tools", "--json", "--host", "opencode"],
            { session_id: sessionID, prompt },
            left(),
            true,
          ),
        ]);
        const reminderText = contextOf(reminder);
        let nudgeText = contextOf(nudge);
        // A child is extracting this session (it may not have fetched the snapshot yet,
        // which quiets the queue's nudge): no second extractor.
        if (jobs.has(sessionID) && nudgeText.includes("thatch_get_extraction_payload")) {
          nudgeText = "";
        }
        const text = [reminderText, nudgeText].filter((item) => item).join("\n\n");
        if (!text) return;
        const part = {
          id: partId(parts),
          sessionID,
          messageID: output?.message?.id ?? hookInput?.messageID,
          type: "text",
          text,
          synthetic: true,
        };
        if (reminderText) part.metadata = { [MARK]: "reminder" };
        parts.push(part);
      } catch {}
    },
  };
};

export default ThatchPlugin;
