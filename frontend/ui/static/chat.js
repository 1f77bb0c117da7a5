// thatch ui, Chat page: new messages as they arrive (server-sent events).
// A progressive enhancement: without this script the page still shows the messages and
// can follow them by reloading. Every stored text is inserted with textContent, never as
// markup: chat bodies are written by agents and may hold HTML.
"use strict";
(function () {
  var list = document.getElementById("chat-messages");
  var status = document.getElementById("chat-live");
  if (!list || typeof EventSource === "undefined") {
    return;
  }
  var after = list.getAttribute("data-after") || "0";
  var source = new EventSource("/chat/stream?after=" + encodeURIComponent(after));

  function say(words) {
    if (status) {
      status.textContent = words;
    }
  }

  source.addEventListener("open", function () {
    say("Live: new messages appear at the top as they arrive.");
  });
  source.addEventListener("error", function () {
    say("Live updates interrupted; retrying. Reloading the page also shows new messages.");
  });
  source.addEventListener("chat", function (event) {
    var message = JSON.parse(event.data);
    var empty = document.getElementById("chat-empty");
    if (empty) {
      empty.remove();
    }
    var item = document.createElement("div");
    item.className = "chat-message";
    var head = document.createElement("p");
    var number = document.createElement("b");
    number.textContent = "#" + message.id;
    head.appendChild(number);
    head.appendChild(document.createTextNode(" " + message.from + " \u2192 " + message.to + " "));
    var meta = document.createElement("span");
    meta.className = "muted";
    meta.textContent =
      message.created_at + " \u00b7 " + message.state + (message.broadcast ? " \u00b7 broadcast" : "");
    head.appendChild(meta);
    var text = document.createElement("pre");
    text.className = "stored";
    text.textContent = message.body;
    item.appendChild(head);
    item.appendChild(text);
    list.insertBefore(item, list.firstChild);
  });
})();
