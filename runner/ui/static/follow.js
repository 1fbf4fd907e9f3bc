// The run page follows a live run: the journal entries written after the page was drawn,
// and the text of the model call in flight as it streams, from the API's event stream
// (same origin). Everything a model or a tool wrote goes in as text (textContent), never as
// markup. With scripts off, the page is what the server drew.
(function () {
  "use strict";
  var live = document.getElementById("live");
  if (!live || typeof EventSource === "undefined") {
    return;
  }
  var entries = document.getElementById("live-entries");
  var streaming = document.getElementById("live-streaming");
  var text = document.getElementById("live-text");
  var state = document.getElementById("live-state");
  var shownPart = null;

  function described(e) {
    switch (e.kind) {
      case "task": return ["user", "task", e.content];
      case "message": return ["user message", "message sent to the run", e.content];
      case "wrap_up": return ["user note", "runner, to the model", e.content];
      case "action":
        if (e.action_type === "tool") {
          return ["assistant call", "model calls " + e.tool, JSON.stringify(e.args)];
        }
        return ["assistant invalid", "model output it could not use", e.content];
      case "observation":
        return ["tool" + (e.is_error ? " error" : ""),
                e.tool + (e.is_error ? " failed" : " returned") + " (attempt " + e.attempt + ")",
                e.content];
      case "final": return ["assistant final", "answer", e.content];
      case "wait": return ["wait", "runner asks a person for " +
                           (e.waits_for === "reply" ? "a reply" : "approval"), e.content];
      case "answer": return ["answer", (e.answer || "answered").replace("_", " ") + " by " +
                             (e.answered_by || "nobody named"), e.content];
      default: return ["note", e.kind, e.content];
    }
  }

  function shown(value) {
    if (value === null || value === undefined) {
      return "";
    }
    return typeof value === "string" ? value : JSON.stringify(value);
  }

  function stopStreaming() {
    streaming.hidden = true;
    text.textContent = "";
    shownPart = null;
  }

  var source = new EventSource(live.dataset.events);
  live.hidden = false;

  source.addEventListener("entry", function (message) {
    var e = JSON.parse(message.data);
    var parts = described(e);
    var box = document.createElement("div");
    box.className = "msg " + parts[0];
    box.dataset.position = String(e.position);
    var who = document.createElement("div");
    who.className = "who";
    who.textContent = (e.step ? "step " + e.step + " · " : "") + parts[1];
    var body = document.createElement("pre");
    body.textContent = shown(parts[2]);
    box.appendChild(who);
    box.appendChild(body);
    entries.appendChild(box);
    if (e.kind === "action" || e.kind === "final" || e.kind === "refused") {
      stopStreaming();  // the call in flight is journaled now: its pieces are in the entry
    }
  });

  source.addEventListener("delta", function (message) {
    var d = JSON.parse(message.data);
    var part = d.step + "/" + d.part + "/" + d.call;
    if (d.ordinal === 0) {
      stopStreaming();  // the call began again (a retry, or a resumed run)
    }
    if (part !== shownPart) {
      if (d.part === "arguments") {
        text.textContent += (text.textContent ? "\n" : "") + "calls " + (d.tool || "a tool") + ": ";
      }
      shownPart = part;
    }
    text.textContent += d.text;
    streaming.hidden = false;
  });

  source.addEventListener("end", function (message) {
    source.close();
    var run = JSON.parse(message.data);
    stopStreaming();
    state.textContent = "the run stopped: " + run.stop_reason + " (reload for the whole page)";
  });
}());
