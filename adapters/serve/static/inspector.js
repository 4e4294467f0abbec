// Forgetting from the inspector: ask first, call the JSON API, show the tombstone; retrying a failed job.
// Stored text only ever reaches the page as textContent.
"use strict";
document.addEventListener("click", async (event) => {
  const button = event.target.closest("button[data-forget]");
  if (!button) return;
  const kind = button.dataset.forget, id = button.dataset.id, ns = button.dataset.ns;
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
      text = "Forgotten. Tombstone " + (doc.tombstone_id || "(none: nothing left to remove)") +
             (doc.forgotten_at ? " at " + doc.forgotten_at : "") +
             "\nRemoved: " + (removed.join(", ") || "nothing");
      button.closest("article, main").classList.add("gone");
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
  const session = button.dataset.retry, ns = button.dataset.ns;
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
