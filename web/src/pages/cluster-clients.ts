import {
  ApiError,
  type ClusterClient,
  type ClusterClientConnectionDetails,
  type ClusterClientPermission,
  type CreatedClusterClient,
} from "../api.js";
import { h, replaceChildren, uniqueId } from "../dom.js";
import { clearStatus, confirmAction, showStatus, table } from "../ui.js";
import { clientNameField } from "./client-name.js";
import { type ClusterTabContext, clusterTabPage, sessionEnded } from "./cluster-tabs.js";
import { downloadText, oneTimeSecretPanel } from "./one-time-secret.js";

/** The permissions a cluster client may hold, with what each allows. */
const permissionChoices: readonly { permission: ClusterClientPermission; description: string }[] = [
  { permission: "gateway", description: "call the cluster's gateway REST API" },
  { permission: "secrets", description: "read the cluster's connector secrets" },
];

/**
 * The environment variables a client application needs, as a `.env` file. The secret is in it: the file is made in
 * the browser and handed to the download, never sent anywhere.
 */
function environmentFile(details: ClusterClientConnectionDetails, secret: string | null): string {
  return [
    `# API client ${details.name}${secret === null ? "" : ": this file holds its secret, keep it safe"}`,
    `SERVICE_ADDRESS=${details.SERVICE_ADDRESS}`,
    `SERVICE_CLIENT_ID=${details.SERVICE_CLIENT_ID}`,
    ...(secret === null ? [] : [`SERVICE_CLIENT_SECRET=${secret}`]),
    `SERVICE_AUTHORIZATION_SERVER_URL=${details.SERVICE_AUTHORIZATION_SERVER_URL}`,
    `SERVICE_TOKEN_AUDIENCE=${details.SERVICE_TOKEN_AUDIENCE}`,
    "",
  ].join("\n");
}

/** A file name made of the client's name, reduced to characters every file system takes. */
function environmentFileName(name: string): string {
  const safe = name.replace(/[^A-Za-z0-9._-]+/g, "-").replace(/^[-.]+|-+$/g, "");
  return `${safe === "" ? "client" : safe.slice(0, 60)}.env`;
}

/** The connection details of a created client; from the creation answer when the details cannot be read. */
async function connectionOf(
  tab: ClusterTabContext,
  created: CreatedClusterClient,
): Promise<ClusterClientConnectionDetails> {
  try {
    return await tab.context.api.clusterClientConnection(tab.clusterId, created.clientId);
  } catch {
    return {
      name: created.name,
      SERVICE_ADDRESS: created.links.gateway,
      SERVICE_CLIENT_ID: created.clientId,
      SERVICE_AUTHORIZATION_SERVER_URL: created.links.oauth,
      SERVICE_TOKEN_AUDIENCE: created.audience,
    };
  }
}

/** A cluster's API clients: list, create (the secret shown once, with copy and download), delete (scope `cluster-clients`). */
export const clusterClientsPage = clusterTabPage({
  segment: "clients",
  title: "API clients",
  render(tab) {
    const list = h("div", {}, h("p", {}, "Loading the API clients…"));
    const revealed = h("div", {});
    const details = h("div", {});
    let clients: ClusterClient[] = [];
    const load = async (): Promise<void> => {
      try {
        clients = await tab.context.api.clusterClients(tab.clusterId);
        replaceChildren(
          list,
          clientTable(tab, clients, details, () => void load()),
        );
      } catch (error) {
        if (!sessionEnded(error))
          showStatus(tab.status, `The API clients could not be loaded: ${(error as Error).message}`);
      }
    };
    void load();
    const form = creationForm(
      tab,
      () => clients,
      (panel) => {
        replaceChildren(revealed, panel);
        void load();
      },
    );
    return h("div", {}, revealed, list, details, form);
  },
});

function clientTable(
  tab: ClusterTabContext,
  clients: readonly ClusterClient[],
  details: HTMLElement,
  onChanged: () => void,
): HTMLElement {
  if (clients.length === 0) return h("p", {}, "The cluster has no API clients yet.");
  return table(
    "API clients of the cluster",
    ["Name", "Client id", "Permissions", "Actions"],
    clients.map((client) => [
      client.name,
      h("code", {}, client.clientId),
      client.permissions.join(", "),
      h(
        "div",
        { class: "row-actions" },
        h(
          "button",
          {
            type: "button",
            "aria-label": `Connection details of ${client.name}`,
            onclick: () => void showConnection(tab, client, details),
          },
          "Connection details",
        ),
        h(
          "button",
          {
            type: "button",
            class: "danger",
            "aria-label": `Delete client ${client.name}`,
            onclick: () =>
              void deleteClient(tab, client, () => {
                // Connection details shown for the deleted client would describe nothing any more.
                details.replaceChildren();
                onChanged();
              }),
          },
          "Delete",
        ),
      ),
    ]),
  );
}

/** Shows the environment variables of an existing client, without its secret, which the platform no longer has. */
async function showConnection(tab: ClusterTabContext, client: ClusterClient, container: HTMLElement): Promise<void> {
  clearStatus(tab.status);
  let connection: ClusterClientConnectionDetails;
  try {
    connection = await tab.context.api.clusterClientConnection(tab.clusterId, client.clientId);
  } catch (error) {
    if (!sessionEnded(error)) {
      showStatus(tab.status, `The connection details could not be loaded: ${(error as Error).message}`);
    }
    return;
  }
  const headingId = uniqueId("connection-title");
  const heading = h("h2", { id: headingId, tabindex: -1 }, `Connection of ${connection.name}`);
  const variables = Object.entries(connection).filter(([name]) => name !== "name");
  replaceChildren(
    container,
    h(
      "section",
      { class: "card", "aria-labelledby": headingId },
      heading,
      h(
        "dl",
        { class: "details" },
        variables.map(([name, value]) => [h("dt", {}, h("code", {}, name)), h("dd", {}, h("code", {}, value))]),
      ),
      h(
        "p",
        { class: "hint" },
        "The secret is shown only when a client is created. If it was lost, create a new client and delete this one.",
      ),
      h(
        "div",
        { class: "actions" },
        h(
          "button",
          {
            type: "button",
            onclick: () => downloadText(environmentFileName(connection.name), environmentFile(connection, null)),
          },
          "Download environment variables",
        ),
        h("button", { type: "button", onclick: () => container.replaceChildren() }, "Close"),
      ),
    ),
  );
  heading.focus();
}

async function deleteClient(tab: ClusterTabContext, client: ClusterClient, onDeleted: () => void): Promise<void> {
  const confirmed = await confirmAction({
    title: "Delete API client",
    message: `${client.name} can no longer get tokens, and the cluster's gateway refuses the tokens it holds.`,
    confirmLabel: "Delete client",
  });
  if (!confirmed) return;
  clearStatus(tab.status);
  try {
    await tab.context.api.deleteClusterClient(tab.clusterId, client.clientId);
    showStatus(tab.status, `API client ${client.name} was deleted.`, "success");
    onDeleted();
  } catch (error) {
    if (!sessionEnded(error))
      showStatus(tab.status, `${client.name} could not be deleted: ${(error as Error).message}`);
  }
}

function creationForm(
  tab: ClusterTabContext,
  existing: () => readonly ClusterClient[],
  onCreated: (panel: HTMLElement) => void,
): HTMLElement {
  const name = clientNameField(() => existing().map((client) => client.name), "the cluster");
  const boxes = new Map<ClusterClientPermission, HTMLInputElement>();
  const permissionsError = h("p", { class: "field-error", id: uniqueId("permissions-error") });
  const permissions = h(
    "fieldset",
    { class: "roles", "aria-describedby": permissionsError.id },
    h("legend", {}, "Permissions"),
    permissionChoices.map((choice) => {
      const box = h("input", {
        type: "checkbox",
        name: "permissions",
        value: choice.permission,
        id: uniqueId(`permission-${choice.permission}`),
        checked: choice.permission === "gateway",
      });
      boxes.set(choice.permission, box);
      return h(
        "div",
        { class: "check" },
        box,
        h("label", { for: box.id }, choice.permission, h("span", { class: "muted" }, ` (${choice.description})`)),
      );
    }),
    permissionsError,
  );
  const submit = h("button", { type: "submit" }, "Create client");
  const headingId = uniqueId("create-client-title");
  const form = h(
    "form",
    { method: "post", novalidate: true, "aria-labelledby": headingId, class: "card" },
    h("h2", { id: headingId }, "Create an API client"),
    name.elements,
    permissions,
    submit,
  );
  permissions.addEventListener("change", () => {
    if ([...boxes.values()].some((box) => box.checked)) permissionsError.textContent = "";
  });
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    clearStatus(tab.status);
    const clientName = name.input.value;
    const problem = name.check();
    const chosen = permissionChoices.map((choice) => choice.permission).filter((value) => boxes.get(value)?.checked);
    permissionsError.textContent = chosen.length === 0 ? "Choose at least one permission." : "";
    if (problem !== null) {
      name.input.focus();
      return;
    }
    if (chosen.length === 0) {
      boxes.get("gateway")?.focus();
      return;
    }
    submit.disabled = true;
    tab.context.api
      .createClusterClient(tab.clusterId, clientName, chosen)
      .then(async (created) => {
        const connection = await connectionOf(tab, created);
        name.input.value = "";
        name.show(null);
        onCreated(
          oneTimeSecretPanel({
            heading: `API client ${created.name} was created`,
            message:
              "Its secret is shown this once: copy it or download the environment variables now. The platform keeps only a hash of it.",
            values: [
              { label: "Client id", value: created.clientId },
              { label: "Client secret", value: created.clientSecret, secret: true },
            ],
            download: {
              label: "Download environment variables",
              fileName: environmentFileName(created.name),
              content: environmentFile(connection, created.clientSecret),
            },
            onDismissed: () => name.input.focus(),
          }),
        );
      })
      .catch((error: unknown) => {
        if (sessionEnded(error)) return;
        // A name another client took meanwhile is a 400 naming clientName: shown next to the field too.
        if (error instanceof ApiError && error.problem.errors?.some((entry) => entry.location === "body/clientName")) {
          name.show(error.message);
          name.input.focus();
        }
        showStatus(tab.status, `The client was not created: ${(error as Error).message}`);
      })
      .finally(() => {
        submit.disabled = false;
      });
  });
  return form;
}
