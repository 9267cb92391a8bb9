import { h } from "../dom.js";
import { type Audiences, Session, SignInError } from "../session.js";
import { clearStatus, field, showStatus, statusRegion } from "../ui.js";

/** Options of the sign-in form. */
export interface SignInOptions {
  audiences: Audiences;
  /** Why the previous session ended, shown above the form. */
  reason: string | null;
  onSignedIn(session: Session): void;
  /** Called when the new session ends later, with the reason. */
  onEnded(reason: string): void;
}

/**
 * The sign-in form: an organization client's id and secret (the bootstrap client works). The form posts nowhere by
 * itself (method post, submission handled here), so the secret never reaches a URL, history entry or log.
 */
export function signInForm(options: SignInOptions): HTMLElement {
  const clientId = h("input", { type: "text", name: "clientId", required: true, autocomplete: "username" });
  const clientSecret = h("input", {
    type: "password",
    name: "clientSecret",
    required: true,
    // The secret is kept in this tab's memory only, so the field must not invite a password store to keep it.
    // "off" is HTML's value for a sensitive value entered each time: a browser that honours it neither fills nor
    // keeps it. The major browsers have ignored it on password fields since 2014 and may still offer to save, as they
    // did with "current-password". "new-password" would stop no more: it labels the field as a password being
    // created, so browsers offer to generate one there and to save what is submitted.
    autocomplete: "off",
  });
  const status = statusRegion();
  const submit = h("button", { type: "submit" }, "Sign in");
  const form = h(
    "form",
    { method: "post", "aria-labelledby": "sign-in-title", novalidate: true },
    field("Client id", clientId),
    field("Client secret", clientSecret, "Kept in this tab's memory only, to renew the session's tokens."),
    status,
    submit,
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    clearStatus(status);
    const id = clientId.value.trim();
    if (id === "") {
      showStatus(status, "Enter the client id.");
      clientId.focus();
      return;
    }
    if (clientSecret.value === "") {
      showStatus(status, "Enter the client secret.");
      clientSecret.focus();
      return;
    }
    submit.disabled = true;
    Session.signIn({ clientId: id, clientSecret: clientSecret.value }, options.audiences, options.onEnded)
      .then((session) => {
        clientSecret.value = "";
        options.onSignedIn(session);
      })
      .catch((error: unknown) => {
        submit.disabled = false;
        const message = error instanceof SignInError ? error.message : "The platform could not be reached.";
        showStatus(status, `Sign-in failed: ${message}`);
        clientSecret.focus();
      });
  });
  return h(
    "section",
    { class: "card" },
    h("h1", { id: "sign-in-title" }, "Sign in to flowplane"),
    options.reason === null ? null : h("p", { class: "status error", role: "alert" }, options.reason),
    h("p", {}, "Sign in with an organization client's id and secret."),
    form,
  );
}
