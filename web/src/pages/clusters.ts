import { type Cluster, type ClusterCreation, type ClusterParameters, endedSession, stageLabels } from "../api.js";
import { h, replaceChildren, uniqueId } from "../dom.js";
import {
  characterCount,
  clearStatus,
  confirmAction,
  field,
  formatInstant,
  inputLengthBound,
  refreshContent,
  repeatWhileShown,
  showStatus,
  statusRegion,
  table,
} from "../ui.js";
import { clusterTabBar } from "./cluster-tabs.js";
import { metricsPanel } from "./metrics.js";
import type { Page, PageContext } from "./page.js";
import { topologyPanel } from "./topology.js";

/** How often the list and a cluster's page ask for fresh status while they are shown. */
const statusPollMs = 3_000;
/** Bounds of the Administration API's cluster fields. */
const maxNameLength = 100;
const maxDescriptionLength = 1_000;

/** A cluster's status in words: its readiness, and its gateway's when that differs. */
function statusText(cluster: Cluster): string {
  const { ready, gatewayStatus } = cluster.status;
  return ready === gatewayStatus ? ready : `${ready} (gateway ${gatewayStatus})`;
}

/** Why the cluster is not Healthy, when the API says. */
function statusReason(cluster: Cluster): HTMLElement | null {
  const { reason } = cluster.status;
  return reason === undefined || reason === "" ? null : h("span", { class: "reason" }, reason);
}

function statusBadge(cluster: Cluster): HTMLElement {
  return h("span", { class: `badge status-${cluster.status.ready.toLowerCase()}` }, statusText(cluster));
}

/** Clusters of the organization: list with live status, create, delete (scope `cluster`). */
export const clustersPage: Page = {
  path: "clusters",
  title: "Clusters",
  visible: (session) => session.canCall("admin") && session.holds("cluster"),
  render(context) {
    const status = statusRegion();
    const list = h("div", { class: "clusters" }, h("p", {}, "Loading clusters…"));
    const creation = h("div", {});
    const section = h("section", {}, status, list, creation);
    const load = async (): Promise<void> => {
      try {
        const clusters = await context.api.clusters();
        refreshContent(
          list,
          clusterTable(clusters, context, status, () => void load()),
          JSON.stringify(clusters),
        );
      } catch (error) {
        if (!endedSession(error)) showStatus(status, `The clusters could not be loaded: ${(error as Error).message}`);
        throw error;
      }
    };
    repeatWhileShown(section, statusPollMs, load);
    context.api
      .clusterParameters()
      .then((parameters) =>
        replaceChildren(
          creation,
          creationForm(parameters, context, status, () => void load()),
        ),
      )
      .catch((error: unknown) => {
        if (!endedSession(error))
          showStatus(status, `The cluster options could not be loaded: ${(error as Error).message}`);
      });
    return section;
  },
};

function clusterTable(
  clusters: readonly Cluster[],
  context: PageContext,
  status: HTMLElement,
  onChanged: () => void,
): HTMLElement {
  if (clusters.length === 0) return h("p", {}, "The organization has no clusters yet.");
  return table(
    "Clusters of the organization",
    ["Name", "Status", "Plan", "Region", "Generation", "Created", "Actions"],
    clusters.map((cluster) => [
      h(
        "a",
        { href: `/console/clusters/${encodeURIComponent(cluster.uuid)}`, "data-route": `clusters/${cluster.uuid}` },
        cluster.name,
      ),
      [statusBadge(cluster), statusReason(cluster)],
      cluster.planType.name,
      cluster.region.name,
      cluster.generation.name,
      h("time", { datetime: cluster.created }, formatInstant(cluster.created)),
      h(
        "button",
        {
          type: "button",
          class: "danger",
          "aria-label": `Delete cluster ${cluster.name}`,
          onclick: () => void deleteCluster(cluster, context, status, onChanged),
        },
        "Delete",
      ),
    ]),
  );
}

/** Deletes a cluster after the user typed its name: its processes and data go with it. */
async function deleteCluster(
  cluster: Cluster,
  context: PageContext,
  status: HTMLElement,
  onDeleted: () => void,
): Promise<void> {
  const confirmed = await confirmAction({
    title: "Delete cluster",
    message: `Deleting ${cluster.name} stops its brokers and gateway and removes all of its data. This cannot be undone.`,
    confirmLabel: "Delete cluster",
    typedConfirmation: cluster.name,
  });
  if (!confirmed) return;
  clearStatus(status);
  try {
    await context.api.deleteCluster(cluster.uuid);
    showStatus(status, `Cluster ${cluster.name} was deleted.`, "success");
    onDeleted();
  } catch (error) {
    if (!endedSession(error)) showStatus(status, `${cluster.name} could not be deleted: ${(error as Error).message}`);
  }
}

function select(name: string, options: readonly { value: string; label: string }[]): HTMLSelectElement {
  return h(
    "select",
    { name },
    options.map((option) => h("option", { value: option.value }, option.label)),
  );
}

/** The creation form: every choice comes from GET /clusters/parameters, and the name is checked as it is typed. */
function creationForm(
  parameters: ClusterParameters,
  context: PageContext,
  status: HTMLElement,
  onCreated: () => void,
): HTMLElement {
  const name = h("input", {
    type: "text",
    name: "name",
    required: true,
    maxlength: inputLengthBound(maxNameLength),
    autocomplete: "off",
  });
  const nameError = h("p", { class: "field-error", id: uniqueId("name-error") });
  name.setAttribute("aria-describedby", nameError.id);
  const plan = select(
    "plan",
    parameters.clusterPlanTypes.map((option) => ({ value: option.uuid, label: option.name })),
  );
  const region = select(
    "region",
    parameters.regions.map((option) => ({ value: option.uuid, label: option.name })),
  );
  const channel = select(
    "channel",
    parameters.channels.map((option) => ({ value: option.uuid, label: option.name })),
  );
  const generation = h("select", { name: "generation" });
  const showGenerations = (): void => {
    const chosen = parameters.channels.find((option) => option.uuid === channel.value);
    replaceChildren(
      generation,
      (chosen?.allowedGenerations ?? []).map((option) =>
        h(
          "option",
          { value: option.uuid, selected: option.uuid === chosen?.defaultGeneration.uuid },
          option.uuid === chosen?.defaultGeneration.uuid ? `${option.name} (default)` : option.name,
        ),
      ),
    );
  };
  channel.addEventListener("change", showGenerations);
  showGenerations();
  const stage = select("stage", [
    { value: "", label: "none" },
    ...stageLabels.map((label) => ({ value: label, label })),
  ]);
  const description = h("input", {
    type: "text",
    name: "description",
    maxlength: inputLengthBound(maxDescriptionLength),
  });
  const submit = h("button", { type: "submit" }, "Create cluster");
  const headingId = uniqueId("create-title");

  const nameProblem = (): string | null => {
    const value = name.value;
    if (value.trim() === "") return "Enter a name.";
    if (characterCount(value) > maxNameLength) return `A name has at most ${maxNameLength} characters.`;
    return null;
  };
  const showNameProblem = (problem: string | null): void => {
    nameError.textContent = problem ?? "";
    name.setAttribute("aria-invalid", problem === null ? "false" : "true");
  };
  name.addEventListener("input", () => {
    if (nameError.textContent !== "") showNameProblem(nameProblem());
  });

  const form = h(
    "form",
    { method: "post", novalidate: true, "aria-labelledby": headingId, class: "card" },
    h("h2", { id: headingId }, "Create a cluster"),
    field("Name", name),
    nameError,
    h(
      "div",
      { class: "grid" },
      field("Plan", plan),
      field("Region", region),
      field("Channel", channel),
      field("Generation", generation, "The flowplane version the cluster runs."),
      field("Stage", stage),
      field("Description", description, `Optional, at most ${maxDescriptionLength} characters.`),
    ),
    submit,
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    clearStatus(status);
    const problem = nameProblem();
    showNameProblem(problem);
    if (problem !== null) {
      name.focus();
      return;
    }
    const creation: ClusterCreation = {
      name: name.value.trim(),
      planTypeId: plan.value,
      channelId: channel.value,
      generationId: generation.value,
      regionId: region.value,
      ...(description.value.trim() === "" ? {} : { description: description.value.trim() }),
      ...(stage.value === "" ? {} : { stageLabel: stage.value as ClusterCreation["stageLabel"] }),
    };
    submit.disabled = true;
    context.api
      .createCluster(creation)
      .then(() => {
        showStatus(status, `Cluster ${creation.name} is being created.`, "success");
        name.value = "";
        description.value = "";
        onCreated();
      })
      .catch((error: unknown) => {
        if (!endedSession(error)) showStatus(status, `The cluster was not created: ${(error as Error).message}`);
      })
      .finally(() => {
        submit.disabled = false;
      });
  });
  return form;
}

/** One cluster: its status (updated live), what it runs, and links to its gateway and management API. */
export const clusterPage: Page = {
  path: "clusters/:clusterId",
  title: "Cluster",
  listed: false,
  visible: (session) => session.canCall("admin") && session.holds("cluster"),
  render(context, parameters) {
    const clusterId = parameters.clusterId ?? "";
    const status = statusRegion();
    const details = h("div", {}, h("p", {}, "Loading the cluster…"));
    const section = h(
      "section",
      {},
      clusterTabBar(context.session, clusterId, ""),
      h(
        "p",
        { class: "actions" },
        h("a", { href: "/console/clusters", "data-route": "clusters" }, "All clusters"),
        h(
          "a",
          {
            href: `/console/clusters/${encodeURIComponent(clusterId)}/scaling`,
            "data-route": `clusters/${encodeURIComponent(clusterId)}/scaling`,
          },
          "Scale this cluster",
        ),
      ),
      status,
      details,
    );
    let topologyShown = false;
    repeatWhileShown(section, statusPollMs, async () => {
      try {
        const cluster = await context.api.cluster(clusterId);
        context.setTitle(`Cluster ${cluster.name}`);
        clearStatus(status);
        refreshContent(details, clusterDetails(cluster), JSON.stringify(cluster));
        if (!topologyShown) {
          topologyShown = true;
          section.append(
            (await context.api.canReachClusters())
              ? topologyPanel(context, cluster)
              : h("p", {}, "This client may not call the cluster's gateway, so its topology is not shown."),
            metricsPanel(context, cluster),
          );
        }
      } catch (error) {
        if (!endedSession(error)) showStatus(status, `The cluster could not be loaded: ${(error as Error).message}`);
        throw error;
      }
    });
    return section;
  },
};

function clusterDetails(cluster: Cluster): HTMLElement {
  const row = (term: string, ...description: (Node | string)[]) => [h("dt", {}, term), h("dd", {}, ...description)];
  const link = (url: string) => h("a", { href: url, rel: "noopener noreferrer" }, url);
  const reason = statusReason(cluster);
  return h(
    "dl",
    { class: "details card" },
    row("Status", statusBadge(cluster), ...(reason === null ? [] : [reason])),
    row("Plan", cluster.planType.name),
    row("Region", cluster.region.name),
    row("Channel", cluster.channel.name),
    row("Generation", cluster.generation.name),
    row("Stage", cluster.stageLabel ?? "none"),
    row("Description", cluster.description === undefined || cluster.description === "" ? "—" : cluster.description),
    row("Created", formatInstant(cluster.created)),
    row("Gateway", link(cluster.links.gateway)),
    row("Management API", link(cluster.links.management)),
    row("Token endpoint for its clients", h("code", {}, cluster.links.oauth)),
    row("Id", h("code", {}, cluster.uuid)),
  );
}
