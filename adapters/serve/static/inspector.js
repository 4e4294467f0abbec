// Forgetting from the inspector: ask first, call the JSON API, show the tombstone; retrying a failed job.
// Stored text only ever reaches the page as textContent. Ids and namespaces sit in data-id and data-ns as
// JSON: an HTML attribute turns a carriage return into a line feed, which would name another session.
"use strict";
const ids = (button) => [JSON.parse(button.dataset.id), JSON.parse(button.dataset.ns)];
document.addEventListener("click", async (event) => {
  const button = event.target.closest("button[data-forget]");
  if (!button) return;
  const kind = button.dataset.forget, [id, ns] = ids(button);
  const what = kind === "session" ? "the session " + id + ", its turns and every memory drawn only from them"
                                  : "the memory " + id;
  if (!window.confirm("Forget " + what + "? This cannot be undone.")) return;
  const param = kind === "session" ? "session_id" : "memory_id";
  const url = "/v1/ns/" + encodeURIComponent(ns) + "/" + (kind === "session" ? "sessions" : "memories") +
              "?" + param + "=" + encodeURIComponent(id);
  const out = button.parentElement.querySelector(".tombstone") ||
              button.parentElement.parentElement.querySelector(".tombstone");
  button.disabled = true;
  let text;
  try {
    const answer = await fetch(url, {method: "DELETE", credentials: "same-origin",
                                     headers: {"X-Tortoise-Inspector": "1"}});
    const doc = await answer.json();
    if (!answer.ok) {
      text = "Not forgotten: " + doc.message;
      button.disabled = false;
    } else {
      const removed = Object.entries(doc.removed || {}).filter(([, n]) => n).map(([t, n]) => t + " " + n);
      if (removed.length) {
        text = "Forgotten. Tombstone " + (doc.tombstone_id || "(none)") +
               (doc.forgotten_at ? " at " + doc.forgotten_at : "") + "\nRemoved: " + removed.join(", ");
        button.closest("article, main").classList.add("gone");
      } else {
        text = "Nothing forgotten: " + (kind === "session" ? "the session " : "the memory ") + id +
               " holds nothing stored (forgotten already?)";
      }
    }
  } catch (error) {
    text = "Not forgotten: " + error;
    button.disabled = false;
  }
  out.textContent = text;
  out.hidden = false;
});

// Queueing a session's failed extraction jobs again: ask first, call the JSON API, say what is pending.
document.addEventListener("click", async (event) => {
  const button = event.target.closest("button[data-retry]");
  if (!button) return;
  const [session, ns] = ids(button);
  if (!window.confirm("Queue the failed extraction of " + session + " again? Its attempts start over; " +
                      "`tortoise worker` or `tortoise flush` runs it.")) return;
  const out = button.parentElement.querySelector(".note");
  button.disabled = true;
  let text;
  try {
    const answer = await fetch("/v1/ns/" + encodeURIComponent(ns) + "/jobs/retry-failed", {
      method: "POST", credentials: "same-origin",
      headers: {"X-Tortoise-Inspector": "1", "Content-Type": "application/json"},
      body: JSON.stringify({session_id: session})});
    const doc = await answer.json();
    if (!answer.ok) {
      text = "Not queued: " + doc.message;
      button.disabled = false;
    } else {
      text = doc.length ? "Queued again (" + doc.map((j) => j.status).join(", ") + ")"
                        : "Nothing to queue: no failed job is left for this session.";
      button.hidden = true;
    }
  } catch (error) {
    text = "Not queued: " + error;
    button.disabled = false;
  }
  out.textContent = text;
  out.hidden = false;
});
