import { ApiError, type MonitoringClient, type MonitoringCredentials } from "../api.js";
import { h, replaceChildren, uniqueId } from "../dom.js";
import { clearStatus, confirmAction, field, formatInstant, showStatus, table } from "../ui.js";
import { type ClusterTabContext, clusterTabPage, sessionEnded } from "./cluster-tabs.js";
import { oneTimeSecretPanel } from "./one-time-secret.js";

/** Usernames the Administration API accepts for monitoring clients. */
const usernamePattern = /^[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}$/;
const maxUsernameLength = 128;

/**
 * A cluster's monitoring (scope `cluster`): whether its Prometheus endpoint is protected, switched on and off, and the
 * monitoring clients whose HTTP Basic credentials open it, each password shown once when it is created or rotated.
 */
export const clusterMonitoringPage = clusterTabPage({
  segment: "monitoring",
  title: "Monitoring",
  render(tab) {
    const protection = h("div", {}, h("p", {}, "Loading the monitoring state…"));
    const revealed = h("div", {});
    const list = h("div", {});
    let clients: MonitoringClient[] = [];
    const showCredentials = (heading: string, credentials: MonitoringCredentials, focusAfter: () => void): void => {
      replaceChildren(
        revealed,
        oneTimeSecretPanel({
          heading,
          message:
            "The password is shown this once: store it in the scraper's configuration now. The platform keeps only a hash of it.",
          values: [
            { label: "Username", value: credentials.username },
            { label: "Password", value: credentials.password, secret: true },
          ],
          onDismissed: focusAfter,
        }),
      );
    };
    const loadClients = async (): Promise<void> => {
      try {
        clients = await tab.context.api.monitoringClients(tab.clusterId);
        replaceChildren(
          list,
          clientTable(tab, clients, showCredentials, () => void loadClients()),
        );
      } catch (error) {
        if (!sessionEnded(error)) {
          showStatus(tab.status, `The monitoring clients could not be loaded: ${(error as Error).message}`);
        }
      }
    };
    const loadProtection = async (refocus = false): Promise<void> => {
      try {
        const active = await tab.context.api.monitoringActive(tab.clusterId);
        replaceChildren(
          protection,
          protectionCard(tab, active, () => void loadProtection(true)),
        );
        // The switch the user just pressed was replaced: the keyboard focus moves to its successor.
        if (refocus) protection.querySelector("button")?.focus();
      } catch (error) {
        if (!sessionEnded(error)) {
          showStatus(tab.status, `The monitoring state could not be loaded: ${(error as Error).message}`);
        }
      }
    };
    void loadProtection();
    void loadClients();
    const form = creationForm(
      tab,
      () => clients,
      (credentials, focusAfter) => {
        showCredentials(`Monitoring client ${credentials.username} was created`, credentials, focusAfter);
        void loadClients();
      },
    );
    return h("div", {}, protection, revealed, list, form);
  },
});

function protectionCard(tab: ClusterTabContext, active: boolean, onChanged: () => void): HTMLElement {
  const headingId = uniqueId("protection-title");
  const toggle = h("button", { type: "button" }, active ? "Turn protection off" : "Turn protection on");
  toggle.addEventListener("click", () => {
    void (async () => {
      if (active) {
        const confirmed = await confirmAction({
          title: "Turn metrics protection off",
          message:
            "Anyone who can reach the cluster's management port will be able to read its metrics. The monitoring clients are kept.",
          confirmLabel: "Turn protection off",
        });
        if (!confirmed) return;
      }
      clearStatus(tab.status);
      toggle.disabled = true;
      try {
        await tab.context.api.setMonitoringActive(tab.clusterId, !active);
        showStatus(tab.status, active ? "Metrics protection is off." : "Metrics protection is on.", "success");
        onChanged();
      } catch (error) {
        if (!sessionEnded(error)) showStatus(tab.status, `The change was refused: ${(error as Error).message}`);
        toggle.disabled = false;
      }
    })();
  });
  return h(
    "section",
    { class: "card", "aria-labelledby": headingId },
    h("h2", { id: headingId }, "Metrics protection"),
    h(
      "p",
      {},
      h("span", { class: `badge ${active ? "status-healthy" : "status-creating"}` }, active ? "On" : "Off"),
      " ",
      active
        ? "The cluster's /actuator/prometheus asks for a monitoring client's username and password."
        : "Anyone who can reach the cluster's management port may read /actuator/prometheus.",
    ),
    toggle,
  );
}

function clientTable(
  tab: ClusterTabContext,
  clients: readonly MonitoringClient[],
  showCredentials: (heading: string, credentials: MonitoringCredentials, focusAfter: () => void) => void,
  onChanged: () => void,
): HTMLElement {
  if (clients.length === 0) return h("p", {}, "The cluster has no monitoring clients yet.");
  return table(
    "Monitoring clients of the cluster",
    ["Username", "Created", "Actions"],
    clients.map((client) => {
      const rotate = h(
        "button",
        { type: "button", "aria-label": `Rotate password of ${client.username}` },
        "Rotate password",
      );
      rotate.addEventListener("click", () => {
        void (async () => {
          const confirmed = await confirmAction({
            title: "Rotate password",
            message: `${client.username} gets a new password, shown once; the current one stops working at once.`,
            confirmLabel: "Rotate password",
          });
          if (!confirmed) return;
          clearStatus(tab.status);
          try {
            const credentials = await tab.context.api.rotateMonitoringPassword(tab.clusterId, client.uuid);
            showCredentials(`New password of ${credentials.username}`, credentials, () => rotate.focus());
          } catch (error) {
            if (!sessionEnded(error)) {
              showStatus(tab.status, `The password was not rotated: ${(error as Error).message}`);
            }
          }
        })();
      });
      return [
        client.username,
        h("time", { datetime: client.created }, formatInstant(client.created)),
        h(
          "div",
          { class: "row-actions" },
          rotate,
          h(
            "button",
            {
              type: "button",
              class: "danger",
              "aria-label": `Delete monitoring client ${client.username}`,
              onclick: () => void deleteClient(tab, client, onChanged),
            },
            "Delete",
          ),
        ),
      ];
    }),
  );
}

async function deleteClient(tab: ClusterTabContext, client: MonitoringClient, onDeleted: () => void): Promise<void> {
  const confirmed = await confirmAction({
    title: "Delete monitoring client",
    message: `Scrapers that use ${client.username} can no longer read the cluster's metrics while protection is on.`,
    confirmLabel: "Delete client",
  });
  if (!confirmed) return;
  clearStatus(tab.status);
  try {
    await tab.context.api.deleteMonitoringClient(tab.clusterId, client.uuid);
    showStatus(tab.status, `Monitoring client ${client.username} was deleted.`, "success");
    onDeleted();
  } catch (error) {
    if (!sessionEnded(error)) {
      showStatus(tab.status, `${client.username} could not be deleted: ${(error as Error).message}`);
    }
  }
}

/** Why a username would be refused, or null; `existing` are the cluster's clients. */
function usernameProblem(username: string, existing: readonly MonitoringClient[]): string | null {
  if (username === "") return "Enter a username.";
  if (!usernamePattern.test(username)) {
    return `A username is 1 to ${maxUsernameLength} letters, digits or . _ @ + -, starting with a letter or digit.`;
  }
  if (existing.some((client) => client.username === username)) return "The cluster has a client of this username.";
  return null;
}

function creationForm(
  tab: ClusterTabContext,
  existing: () => readonly MonitoringClient[],
  onCreated: (credentials: MonitoringCredentials, focusAfter: () => void) => void,
): HTMLElement {
  const username = h("input", {
    type: "text",
    name: "username",
    maxlength: maxUsernameLength,
    autocomplete: "off",
    spellcheck: "false",
  });
  const usernameError = h("p", { class: "field-error", id: uniqueId("username-error") });
  const headingId = uniqueId("monitoring-client-title");
  const submit = h("button", { type: "submit" }, "Create monitoring client");
  const form = h(
    "form",
    { method: "post", novalidate: true, "aria-labelledby": headingId, class: "card" },
    h("h2", { id: headingId }, "Create a monitoring client"),
    field("Username", username, "Letters, digits or . _ @ + -; unique in the cluster."),
    usernameError,
    submit,
  );
  username.setAttribute(
    "aria-describedby",
    `${username.getAttribute("aria-describedby") ?? ""} ${usernameError.id}`.trim(),
  );
  const show = (problem: string | null): void => {
    usernameError.textContent = problem ?? "";
    username.setAttribute("aria-invalid", problem === null ? "false" : "true");
  };
  username.addEventListener("input", () => {
    if (usernameError.textContent !== "") show(usernameProblem(username.value, existing()));
  });
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    clearStatus(tab.status);
    const problem = usernameProblem(username.value, existing());
    show(problem);
    if (problem !== null) {
      username.focus();
      return;
    }
    submit.disabled = true;
    tab.context.api
      .createMonitoringClient(tab.clusterId, username.value)
      .then((credentials) => {
        username.value = "";
        onCreated(credentials, () => username.focus());
      })
      .catch((error: unknown) => {
        if (sessionEnded(error)) return;
        // A username another client took meanwhile is a 409: shown next to the field too.
        if (error instanceof ApiError && error.status === 409) {
          show(error.message);
          username.focus();
        }
        showStatus(tab.status, `The monitoring client was not created: ${(error as Error).message}`);
      })
      .finally(() => {
        submit.disabled = false;
      });
  });
  return form;
}
