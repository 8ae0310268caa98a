// The consent page: sends the approver's decision with the session's CSRF token, then follows
// the answer to the client's redirect URI (a script navigation, which the page's
// `form-action 'self'` would not allow a form's redirect to do).
"use strict";
const form = document.getElementById("consent");
const error = document.getElementById("consent-error");
form.addEventListener("submit", async (event) => {
  event.preventDefault();
  const approve = event.submitter && event.submitter.value === "approve";
  const body = JSON.stringify({ approve, agent: form.elements.agent.value });
  try {
    const reply = await fetch(location.pathname, {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-Leo-Csrf": form.dataset.csrf },
      body,
    });
    const answer = await reply.json();
    if (answer.ok) {
      location.assign(answer.data.redirect);
    } else {
      error.textContent = answer.error.message;
    }
  } catch (e) {
    error.textContent = String(e);
  }
});
