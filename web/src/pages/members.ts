import { type AssignableRole, assignableRoles, endedSession, type Member } from "../api.js";
import { h, replaceChildren, uniqueId } from "../dom.js";
import { clearStatus, confirmAction, field, showStatus, statusRegion, table } from "../ui.js";
import type { Page, PageContext } from "./page.js";

/** Longest email address the Administration API accepts. */
const emailMaxLength = 254;

/** Why an email address would be refused, or null when it looks acceptable. */
function emailProblem(email: string): string | null {
  if (email === "") return "Enter an email address.";
  if (email.length > emailMaxLength) return `An email address has at most ${emailMaxLength} characters.`;
  if (!/^[^\s@]+@[^\s@]+\.[^\s@]+$/.test(email)) return "Enter an email address such as ada@example.com.";
  return null;
}

/** Organization members: list, invite, change roles, remove (scope `members`). */
export const membersPage: Page = {
  path: "members",
  title: "Members",
  visible: (session) => session.canCall("admin") && session.holds("members"),
  render(context) {
    const status = statusRegion();
    const list = h("div", { class: "members" }, h("p", {}, "Loading members…"));
    const form = inviteForm(context, status, () => void load());
    const load = async (): Promise<void> => {
      try {
        const members = await context.api.members();
        replaceChildren(
          list,
          memberTable(members, context, status, form, () => void load()),
        );
      } catch (error) {
        if (endedSession(error)) return;
        showStatus(status, `The members could not be loaded: ${(error as Error).message}`);
      }
    };
    void load();
    return h("section", {}, status, list, form.element);
  },
};

interface InviteForm {
  element: HTMLElement;
  /** Fills the form with an existing member, to change its roles. */
  edit(member: Member): void;
}

function inviteForm(context: PageContext, status: HTMLElement, onChanged: () => void): InviteForm {
  const email = h("input", { type: "email", name: "email", required: true, maxlength: emailMaxLength });
  const emailError = h("p", { class: "field-error", id: uniqueId("email-error") });
  email.setAttribute("aria-describedby", emailError.id);
  const roleBoxes = new Map<AssignableRole, HTMLInputElement>();
  const rolesError = h("p", { class: "field-error", id: uniqueId("roles-error") });
  const roles = h(
    "fieldset",
    { class: "roles", "aria-describedby": rolesError.id },
    h("legend", {}, "Roles"),
    assignableRoles.map((role) => {
      const box = h("input", { type: "checkbox", name: "roles", value: role, id: uniqueId(`role-${role}`) });
      roleBoxes.set(role, box);
      return h("div", { class: "check" }, box, h("label", { for: box.id }, role));
    }),
    rolesError,
  );
  const headingId = uniqueId("invite-title");
  const submit = h("button", { type: "submit" }, "Invite or change roles");
  const element = h(
    "form",
    { method: "post", novalidate: true, "aria-labelledby": headingId, class: "card" },
    h("h2", { id: headingId }, "Invite a member or change roles"),
    field("Email", email),
    emailError,
    roles,
    submit,
  );
  const validate = (): { email: string; roles: AssignableRole[] } | null => {
    const address = email.value.trim();
    const problem = emailProblem(address);
    emailError.textContent = problem ?? "";
    email.setAttribute("aria-invalid", problem === null ? "false" : "true");
    const chosen = assignableRoles.filter((role) => roleBoxes.get(role)?.checked === true);
    rolesError.textContent = chosen.length === 0 ? "Choose at least one role." : "";
    if (problem !== null) email.focus();
    else if (chosen.length === 0) roleBoxes.get(assignableRoles[0]!)?.focus();
    return problem === null && chosen.length > 0 ? { email: address, roles: chosen } : null;
  };
  // Errors appear on submit only (showing them on blur would move the submit button under a pointer on its way
  // there) and disappear as soon as the input is fixed.
  email.addEventListener("input", () => {
    if (emailError.textContent !== "" && emailProblem(email.value.trim()) === null) {
      emailError.textContent = "";
      email.setAttribute("aria-invalid", "false");
    }
  });
  roles.addEventListener("change", () => {
    if (assignableRoles.some((role) => roleBoxes.get(role)?.checked === true)) rolesError.textContent = "";
  });
  element.addEventListener("submit", (event) => {
    event.preventDefault();
    clearStatus(status);
    const valid = validate();
    if (valid === null) return;
    submit.disabled = true;
    context.api
      .inviteOrChangeRoles(valid.email, valid.roles)
      .then(() => {
        showStatus(status, `${valid.email} now holds ${valid.roles.join(", ")}.`, "success");
        email.value = "";
        for (const box of roleBoxes.values()) box.checked = false;
        onChanged();
      })
      .catch((error: unknown) => {
        if (endedSession(error)) return;
        showStatus(status, `The change was refused: ${(error as Error).message}`);
      })
      .finally(() => {
        submit.disabled = false;
      });
  });
  return {
    element,
    edit(member) {
      email.value = member.email;
      for (const [role, box] of roleBoxes) box.checked = member.roles.includes(role);
      email.focus();
    },
  };
}

function memberTable(
  members: readonly Member[],
  context: PageContext,
  status: HTMLElement,
  form: InviteForm,
  onChanged: () => void,
): HTMLElement {
  if (members.length === 0) return h("p", {}, "The organization has no members.");
  return table(
    "Members of the organization",
    ["Name", "Email", "Roles", "Invitation", "Actions"],
    members.map((member) => [
      member.name === "" ? "—" : member.name,
      member.email,
      member.roles.join(", "),
      member.invitePending ? "pending" : "accepted",
      member.roles.includes("owner")
        ? h("span", { class: "muted" }, "owner")
        : h(
            "div",
            { class: "row-actions" },
            h(
              "button",
              { type: "button", "aria-label": `Change roles of ${member.email}`, onclick: () => form.edit(member) },
              "Change roles",
            ),
            h(
              "button",
              {
                type: "button",
                class: "danger",
                "aria-label": `Remove ${member.email}`,
                onclick: () => void removeMember(member, context, status, onChanged),
              },
              "Remove",
            ),
          ),
    ]),
  );
}

async function removeMember(
  member: Member,
  context: PageContext,
  status: HTMLElement,
  onChanged: () => void,
): Promise<void> {
  const confirmed = await confirmAction({
    title: "Remove member",
    message: `${member.email} will lose access to the organization.`,
    confirmLabel: "Remove",
  });
  if (!confirmed) return;
  clearStatus(status);
  try {
    await context.api.removeMember(member.email);
    showStatus(status, `${member.email} was removed.`, "success");
    onChanged();
  } catch (error) {
    if (endedSession(error)) return;
    showStatus(status, `${member.email} could not be removed: ${(error as Error).message}`);
  }
}
