/* AIMON Admin's one script, beside htmx. A static file, loaded with `defer`: the
   Content-Security-Policy forbids inline scripts.

   1. htmx request failures become a toast saying what failed.
   htmx swaps nothing on a 4xx/5xx answer and nothing when the server cannot be reached;
   without this the click would simply seem to do nothing. */
(function () {
  "use strict";

  var REASONS = {
    400: "the server refused it as invalid",
    403: "your role does not allow it, or your session has ended (reload the page to sign in again)",
    404: "it no longer exists, or is not yours to see",
    405: "the server does not accept it that way",
    409: "it changed meanwhile; reload the page",
    429: "too many attempts; wait a moment and try again",
    500: "the server hit an error (it is logged); try again, or reload the page"
  };

  // The database is unreachable (a 503): the server's own words, sent in the X-Aimon-Message
  // header (aimon_admin/core/views.py ERROR_MESSAGES[503] and ["503-post"]); these copies,
  // word for word the same, are for a 503 that came without them.
  var UNAVAILABLE = {
    get: "The database cannot be reached just now, so this page cannot be shown. Nothing was changed. Try again in a few seconds.",
    post: "The database cannot be reached just now. What you sent (an answer, or a change) may or may not have been saved: once the database is back, open the request's page (or reload this page) to see what holds before you send it again."
  };

  // What failed, as the start of a sentence: the element's data-what ("Checking for new
  // requests"), else the words of the button that was pressed.
  function whatFailed(elt) {
    if (elt && elt.getAttribute && elt.getAttribute("data-what")) { return elt.getAttribute("data-what") + " failed"; }
    var button = elt && elt.matches && elt.matches("button, a") ? elt : elt && elt.querySelector && elt.querySelector("button[type=submit], button");
    var words = button ? (button.getAttribute("aria-label") || button.textContent || "").trim() : "";
    return words ? "“" + words.replace(/\s+/g, " ") + "” failed" : "Updating the page failed";
  }

  function region() {
    var found = document.getElementById("htmx-toasts");
    if (!found) {
      found = document.createElement("div");
      found.id = "htmx-toasts";
      found.className = "toasts-floating";
      document.body.appendChild(found);
    }
    return found;
  }

  function show(text) {
    var box = region();
    var existing = box.querySelectorAll(".toast");
    for (var i = 0; i < existing.length; i++) {
      if (existing[i].getAttribute("data-text") === text) { return; }  // a failing poll repeats
    }
    var toast = document.createElement("div");
    toast.className = "toast toast-error toast-dismissable";
    toast.setAttribute("role", "alert");
    toast.setAttribute("data-text", text);
    var words = document.createElement("p");
    words.textContent = text;
    var close = document.createElement("button");
    close.type = "button";
    close.className = "btn btn-small toast-close";
    close.setAttribute("aria-label", "Dismiss this message");
    close.textContent = "×";
    close.addEventListener("click", function () { toast.remove(); });
    toast.appendChild(words);
    toast.appendChild(close);
    box.appendChild(toast);
  }

  document.addEventListener("htmx:responseError", function (event) {
    var status = event.detail.xhr ? event.detail.xhr.status : 0;
    if (status === 503) {
      var verb = event.detail.requestConfig && event.detail.requestConfig.verb;
      var told = event.detail.xhr.getResponseHeader("X-Aimon-Message") || UNAVAILABLE[verb === "get" ? "get" : "post"];
      show(whatFailed(event.detail.elt) + ". " + told + " (HTTP 503)");
      return;
    }
    var reason = REASONS[status] || (status >= 500 ? REASONS[500] : "the server answered " + status);
    show(whatFailed(event.detail.elt) + ": " + reason + " (HTTP " + status + ").");
  });
  document.addEventListener("htmx:sendError", function (event) {
    show(whatFailed(event.detail.elt) + ": the server could not be reached. Check the connection and try again.");
  });

  /* 2. A session that ended while the page was open: an htmx request is sent on to the
     sign-in page, and htmx would put that whole page inside the card or the list. The
     page itself goes to sign in instead, coming back here afterwards. */
  document.addEventListener("htmx:beforeSwap", function (event) {
    var login = document.body.getAttribute("data-login-url");
    var xhr = event.detail.xhr;
    if (!login || !xhr || !xhr.responseURL) { return; }
    if (new URL(xhr.responseURL, window.location.href).pathname === login) {
      event.detail.shouldSwap = false;
      window.location.assign(login + "?next=" + encodeURIComponent(window.location.pathname + window.location.search));
    }
  });

  /* 3. Focus survives a swap. htmx puts focus back on an element with the same id (the
     answer buttons have ids, so a poll that brings a new request in keeps it). When the
     focused control is gone (the skill was answered), focus moves to the next answer in
     the swapped card, else to the card's heading link: never back to the top of the page. */
  var swapping = null;
  document.addEventListener("htmx:beforeSwap", function (event) {
    var target = event.detail.target;
    swapping = target && target.id && target.contains(document.activeElement) ? target.id : null;
  });
  document.addEventListener("htmx:afterSettle", function () {
    var id = swapping;
    swapping = null;
    if (!id || (document.activeElement && document.activeElement !== document.body)) { return; }
    var swapped = document.getElementById(id);
    if (!swapped) { return; }
    var next = swapped.querySelector("button.btn-answer:not([disabled])") || swapped.querySelector("a[href], button:not([disabled])");
    if (next) { next.focus(); }
  });

  /* 4. Copy buttons: <button data-copy="ID"> copies the value of the element with that id
     (a new token, shown once) and says so on the button for a moment. Without the
     clipboard API (an insecure origin) the value is selected for Ctrl+C instead. */
  document.addEventListener("click", function (event) {
    var button = event.target && event.target.closest ? event.target.closest("button[data-copy]") : null;
    if (!button) { return; }
    var source = document.getElementById(button.getAttribute("data-copy"));
    if (!source) { return; }
    var value = source.value !== undefined ? source.value : source.textContent;
    var label = button.getAttribute("data-label") || button.textContent;
    button.setAttribute("data-label", label);
    function said(words) {
      button.textContent = words;
      window.setTimeout(function () { button.textContent = label; }, 2000);
    }
    function selectIt() {
      if (source.select) { source.focus(); source.select(); }
      said("Press Ctrl+C to copy");
    }
    if (navigator.clipboard && navigator.clipboard.writeText) {
      navigator.clipboard.writeText(value).then(function () { said(button.getAttribute("data-copied") || "Copied"); }, selectIt);
    } else {
      selectIt();
    }
  });

  /* 5. The Menu button (narrow screens; wide ones show the navigation as a sidebar and hide
     the button): a disclosure. It shows or hides the element its aria-controls names and
     says which in aria-expanded; Escape closes it and puts focus back on the button. Tab
     goes from the button straight into the menu, which follows it in the page. */
  var toggle = document.querySelector("button.nav-toggle[aria-controls]");
  var menu = toggle && document.getElementById(toggle.getAttribute("aria-controls"));
  if (toggle && menu) {
    var setOpen = function (open) {
      toggle.setAttribute("aria-expanded", open ? "true" : "false");
      if (open) { menu.setAttribute("data-open", ""); } else { menu.removeAttribute("data-open"); }
    };
    toggle.addEventListener("click", function () {
      setOpen(toggle.getAttribute("aria-expanded") !== "true");
    });
    document.addEventListener("keydown", function (event) {
      if (event.key !== "Escape" || toggle.getAttribute("aria-expanded") !== "true") { return; }
      var inside = menu.contains(document.activeElement) || document.activeElement === toggle;
      setOpen(false);
      if (inside) { toggle.focus(); }
    });
  }
})();
