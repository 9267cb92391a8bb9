import {
  type BrokerEntry,
  type Cluster,
  type ClusterOperationEntry,
  type ClusterPatch,
  type ClusterStatus,
  endedSession,
  type ScaleResponse,
} from "../api.js";
import { h, replaceChildren, uniqueId } from "../dom.js";
import {
  clearStatus,
  confirmAction,
  field,
  formatInstant,
  refreshContent,
  repeatWhileShown,
  showStatus,
  statusRegion,
  table,
} from "../ui.js";
import type { Page, PageContext } from "./page.js";

/** How often a running change is asked about while it is watched. */
const changePollMs = 1_000;
/** Bounds of the form: the planner takes any shape, the console keeps typing mistakes out. */
const maxBrokers = 32;
const maxPartitions = 1_000;

/** An operation in words, e.g. `PARTITION_JOIN broker 3 partition 2 (priority 1)`, as the CLI writes it. */
export function describeOperation(operation: ClusterOperationEntry): string {
  const parts = [operation.operation, `broker ${operation.brokerId}`];
  if (operation.partitionId !== undefined) parts.push(`partition ${operation.partitionId}`);
  if (operation.priority !== undefined) parts.push(`(priority ${operation.priority})`);
  if (operation.brokers !== undefined && operation.brokers.length > 0) parts.push(`[${operation.brokers.join(", ")}]`);
  return parts.join(" ");
}

function formatBytes(bytes: number): string {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return unit === 0 ? `${Math.round(value)} B` : `${value.toFixed(1)} ${units[unit]}`;
}

function formatDuration(seconds: number): string {
  const whole = Math.max(0, Math.round(seconds));
  if (whole < 60) return `${whole} s`;
  if (whole < 3600) return `${Math.floor(whole / 60)} min ${whole % 60} s`;
  return `${Math.floor(whole / 3600)} h ${Math.floor((whole % 3600) / 60)} min`;
}

/** The shape of a configuration: broker count, partition count, and the replication factor most partitions have. */
function shapeOf(brokers: readonly BrokerEntry[]): { brokers: number; partitions: number; replicationFactor: number } {
  const replicas = new Map<number, number>();
  for (const broker of brokers) {
    for (const partition of broker.partitions) replicas.set(partition.id, (replicas.get(partition.id) ?? 0) + 1);
  }
  const counts = [...replicas.values()];
  return {
    brokers: brokers.length,
    partitions: replicas.size,
    replicationFactor: counts.length === 0 ? 1 : Math.min(...counts),
  };
}

/** A configuration as a grid of partitions by brokers, each replica with its priority and its state when not ACTIVE. */
function configurationGrid(caption: string, brokers: readonly BrokerEntry[], highlight?: readonly BrokerEntry[]) {
  const sorted = [...brokers].sort((left, right) => left.id - right.id);
  const partitionIds = [
    ...new Set(sorted.flatMap((broker) => broker.partitions.map((partition) => partition.id))),
  ].sort((left, right) => left - right);
  const before = new Map<string, number>();
  for (const broker of highlight ?? []) {
    for (const partition of broker.partitions) before.set(`${broker.id}/${partition.id}`, partition.priority);
  }
  const captionId = uniqueId("grid-caption");
  return h(
    "div",
    { class: "table-scroll", role: "region", "aria-labelledby": captionId, tabindex: 0 },
    h(
      "table",
      { class: "topology" },
      h("caption", { id: captionId }, caption),
      h(
        "thead",
        {},
        h(
          "tr",
          {},
          h("th", { scope: "col" }, "Partition"),
          sorted.map((broker) =>
            h("th", { scope: "col" }, `Broker ${broker.id}`, broker.state === "ACTIVE" ? null : ` (${broker.state})`),
          ),
        ),
      ),
      h(
        "tbody",
        {},
        partitionIds.map((partitionId) =>
          h(
            "tr",
            {},
            h("th", { scope: "row" }, String(partitionId)),
            sorted.map((broker) => {
              const replica = broker.partitions.find((partition) => partition.id === partitionId);
              const key = `${broker.id}/${partitionId}`;
              if (replica === undefined) {
                return h(
                  "td",
                  { class: before.has(key) ? "replica removed" : "replica none" },
                  before.has(key) ? "leaves" : "—",
                );
              }
              const changed = highlight !== undefined && before.get(key) !== replica.priority;
              return h(
                "td",
                { class: `replica${changed ? " changed" : ""}` },
                `priority ${replica.priority}`,
                replica.state === "ACTIVE" ? null : ` (${replica.state})`,
                changed ? (before.has(key) ? " (changed)" : " (new)") : null,
              );
            }),
          ),
        ),
      ),
    ),
  );
}

/** `broker 3` or `brokers 3, 4`. */
function brokersNamed(ids: readonly number[]): string {
  return `${ids.length === 1 ? "broker" : "brokers"} ${ids.join(", ")}`;
}

/** Brokers the plan adds, ascending. */
function addedBrokers(plan: ScaleResponse): number[] {
  const current = new Set(plan.currentTopology.map((broker) => broker.id));
  return plan.expectedTopology
    .map((broker) => broker.id)
    .filter((id) => !current.has(id))
    .sort((left, right) => left - right);
}

/** The warnings the specification asks for before a change starts. */
function warnings(plan: ScaleResponse): string[] {
  const expected = new Set(plan.expectedTopology.map((broker) => broker.id));
  const removed = plan.currentTopology
    .map((broker) => broker.id)
    .filter((id) => !expected.has(id))
    .sort((left, right) => left - right);
  const added = addedBrokers(plan);
  const result: string[] = [];
  if (removed.length > 0) {
    result.push(
      `The platform keeps ${brokersNamed(removed)} running until the change completes, while partitions move away; ` +
        "then it stops them and deletes their data. Stopping a leaving broker earlier stalls the change, and a " +
        "partition left with a single replica can lose data.",
    );
  }
  if (added.length > 0) {
    result.push(
      `The platform starts ${brokersNamed(added)} before the change starts. A broker the change has not added yet when it is cancelled is stopped again.`,
    );
  }
  if (shapeOf(plan.expectedTopology).replicationFactor === 1 && plan.expectedTopology.length > 0) {
    result.push("With one replica per partition, losing a broker loses the data of its partitions.");
  }
  return result;
}

/** Scaling a cluster: plan a new shape as a dry run, start it after confirming, watch it, cancel it. */
export const scalingPage: Page = {
  path: "clusters/:clusterId/scaling",
  title: "Scaling",
  listed: false,
  visible: (session) => session.canCall("admin") && session.holds("cluster"),
  render(context, parameters) {
    const clusterId = parameters.clusterId ?? "";
    const status = statusRegion();
    const content = h("div", {}, h("p", {}, "Loading the cluster…"));
    const section = h(
      "section",
      {},
      h(
        "p",
        {},
        h(
          "a",
          { href: `/console/clusters/${encodeURIComponent(clusterId)}`, "data-route": `clusters/${clusterId}` },
          "Back to the cluster",
        ),
      ),
      status,
      content,
    );
    (async () => {
      const cluster = await context.api.cluster(clusterId);
      context.setTitle(`Scaling ${cluster.name}`);
      if (!(await context.api.canReachClusters())) {
        replaceChildren(content, h("p", {}, "This client may not call the cluster's management API."));
        return;
      }
      replaceChildren(content, scalingView(context, cluster, status));
    })().catch((error: unknown) => {
      if (!endedSession(error)) {
        showStatus(status, `The cluster could not be loaded: ${(error as Error).message}`);
      }
    });
    return section;
  },
};

function scalingView(context: PageContext, cluster: Cluster, status: HTMLElement): HTMLElement {
  const management = cluster.links.management;
  const current = h("div", {});
  const plan = h("div", {});
  const watch = h("div", {});
  const brokers = h("input", { type: "number", name: "brokers", min: 1, max: maxBrokers, required: true });
  const replicationFactor = h("input", {
    type: "number",
    name: "replicationFactor",
    min: 1,
    max: maxBrokers,
    required: true,
  });
  const partitions = h("input", { type: "number", name: "partitions", min: 1, max: maxPartitions, required: true });
  const formError = h("p", { class: "field-error", role: "alert" });
  const planButton = h("button", { type: "submit" }, "Plan (dry run)");
  const headingId = uniqueId("scale-title");
  const form = h(
    "form",
    { method: "post", novalidate: true, "aria-labelledby": headingId, class: "card" },
    h("h2", { id: headingId }, "New shape"),
    h(
      "div",
      { class: "grid" },
      field("Brokers", brokers),
      field("Replication factor", replicationFactor, "Replicas per partition, at most the number of brokers."),
      field(
        "Partitions",
        partitions,
        "Experimental: never fewer than today; the cluster refuses more unless partition scaling is enabled.",
      ),
    ),
    formError,
    planButton,
  );
  let lastStatus: ClusterStatus | null = null;
  let watchedChange: number | null = null;
  let formFilled = false;

  const readPatch = (): ClusterPatch | null => {
    const values = {
      brokers: Number(brokers.value),
      replicationFactor: Number(replicationFactor.value),
      partitions: Number(partitions.value),
    };
    const problems: [HTMLInputElement, string][] = [];
    if (!Number.isInteger(values.brokers) || values.brokers < 1 || values.brokers > maxBrokers) {
      problems.push([brokers, `Brokers: a whole number from 1 to ${maxBrokers}.`]);
    }
    if (
      !Number.isInteger(values.replicationFactor) ||
      values.replicationFactor < 1 ||
      values.replicationFactor > values.brokers
    ) {
      problems.push([replicationFactor, "Replication factor: a whole number from 1 to the number of brokers."]);
    }
    const today = lastStatus === null ? 1 : shapeOf(lastStatus.brokers).partitions;
    if (!Number.isInteger(values.partitions) || values.partitions < today || values.partitions > maxPartitions) {
      problems.push([partitions, `Partitions: a whole number from ${today} (today's count) to ${maxPartitions}.`]);
    }
    for (const input of [brokers, replicationFactor, partitions]) {
      input.setAttribute("aria-invalid", problems.some(([bad]) => bad === input) ? "true" : "false");
    }
    formError.textContent = problems.map(([, message]) => message).join(" ");
    if (problems.length > 0) {
      problems[0]?.[0].focus();
      return null;
    }
    const shape = lastStatus === null ? null : shapeOf(lastStatus.brokers);
    const patch: ClusterPatch = { brokers: { count: values.brokers } };
    if (
      shape === null ||
      values.partitions !== shape.partitions ||
      values.replicationFactor !== shape.replicationFactor
    ) {
      patch.partitions = { count: values.partitions, replicationFactor: values.replicationFactor };
    }
    return patch;
  };

  const startWatching = (changeId: number): void => {
    watchedChange = changeId;
  };

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    clearStatus(status);
    const patch = readPatch();
    if (patch === null) return;
    planButton.disabled = true;
    context.api
      .scaleCluster(cluster.uuid, patch, true)
      .then((planned) => replaceChildren(plan, planView(planned, patch)))
      .catch((error: unknown) => {
        if (!endedSession(error)) {
          replaceChildren(plan);
          showStatus(status, `The cluster refused the plan: ${(error as Error).message}`);
        }
      })
      .finally(() => {
        planButton.disabled = false;
      });
  });

  const planView = (planned: ScaleResponse, patch: ClusterPatch): HTMLElement => {
    const headingIdentifier = uniqueId("plan-title");
    if (planned.plannedChanges.length === 0) {
      return h("section", { class: "card" }, h("p", {}, "Nothing to change: the cluster already has that shape."));
    }
    const added = addedBrokers(planned);
    const start = h("button", { type: "button", class: "danger" }, "Start the change");
    start.addEventListener("click", () => {
      void (async () => {
        const confirmed = await confirmAction({
          title: "Start the change",
          message: `${added.length === 0 ? "" : `The platform starts ${brokersNamed(added)} first. `}${planned.plannedChanges.length} operations will run one after the other. Operations already applied stay applied if the change is cancelled.`,
          confirmLabel: "Start",
        });
        if (!confirmed) return;
        clearStatus(status);
        try {
          showStatus(
            status,
            added.length === 0 ? "Starting the change…" : `Starting ${brokersNamed(added)}, then the change…`,
            "success",
          );
          const started = await context.api.scaleCluster(cluster.uuid, patch, false);
          replaceChildren(plan);
          startWatching(started.changeId);
          showStatus(status, `Change ${started.changeId} started.`, "success");
        } catch (error) {
          if (!endedSession(error)) {
            showStatus(status, `The change was refused: ${(error as Error).message}`);
          }
        }
      })();
    });
    return h(
      "section",
      { class: "card", "aria-labelledby": headingIdentifier },
      h(
        "h2",
        { id: headingIdentifier },
        `Plan: ${planned.plannedChanges.length} operations (dry run, nothing recorded)`,
      ),
      warnings(planned).map((warning) => h("p", { class: "warning", role: "note" }, warning)),
      h(
        "div",
        { class: "before-after" },
        configurationGrid("Before", planned.currentTopology),
        configurationGrid("After", planned.expectedTopology, planned.currentTopology),
      ),
      h("h3", {}, "Operations, in order"),
      h(
        "ol",
        { class: "operations" },
        planned.plannedChanges.map((operation) => h("li", {}, describeOperation(operation))),
      ),
      start,
    );
  };

  repeatWhileShown(current, changePollMs, async () => {
    try {
      const fresh = await context.api.clusterStatus(management);
      lastStatus = fresh;
      if (!formFilled) {
        formFilled = true;
        const shape = shapeOf(fresh.brokers);
        brokers.value = String(shape.brokers);
        replicationFactor.value = String(shape.replicationFactor);
        partitions.value = String(shape.partitions);
      }
      if (fresh.pendingChange !== undefined) watchedChange = fresh.pendingChange.id;
      refreshContent(current, configurationGrid("Current configuration", fresh.brokers), JSON.stringify(fresh.brokers));
      refreshContent(
        watch,
        changeView(context, cluster, fresh, watchedChange, status),
        JSON.stringify([fresh.pendingChange, fresh.lastChange, watchedChange]),
      );
      form.hidden = fresh.pendingChange !== undefined;
    } catch (error) {
      if (!endedSession(error)) {
        showStatus(status, `The cluster's configuration could not be read: ${(error as Error).message}`);
      }
      throw error;
    }
  });
  return h("div", {}, watch, current, form, plan);
}

/** The running change (progress, each operation's state, cancel) or, without one, the last change. */
function changeView(
  context: PageContext,
  cluster: Cluster,
  status: ClusterStatus,
  watchedChange: number | null,
  statusRegionElement: HTMLElement,
): HTMLElement {
  const headingId = uniqueId("change-title");
  const pending = status.pendingChange;
  const last = status.lastChange;
  const lastLine =
    last === undefined
      ? h("p", {}, "No change has run on this cluster yet.")
      : h(
          "p",
          {},
          `Last change: ${last.id}, ${last.status}, started ${formatInstant(last.startedAt)}, ended ${formatInstant(last.completedAt)}.`,
        );
  const history = changeHistory(status);
  if (pending === undefined) {
    return h(
      "section",
      { class: "card", "aria-labelledby": headingId },
      h(
        "h2",
        { id: headingId },
        watchedChange !== null && last?.id === watchedChange ? `Change ${last.id} ${last.status}` : "Changes",
      ),
      lastLine,
      history,
    );
  }
  const done = pending.completed.length;
  const total = done + pending.pending.length;
  const progress = pending.progress;
  const progressId = uniqueId("change-progress");
  const cancel = h("button", { type: "button", class: "danger" }, "Cancel the change");
  cancel.addEventListener("click", () => {
    void (async () => {
      const confirmed = await confirmAction({
        title: "Cancel the change",
        message: `Change ${pending.id} stops after the running operation; the ${done} operations already applied stay applied.`,
        confirmLabel: "Cancel the change",
      });
      if (!confirmed) return;
      try {
        await context.api.cancelChange(cluster.links.management, pending.id);
        showStatus(statusRegionElement, `Change ${pending.id} was cancelled.`, "success");
      } catch (error) {
        if (!endedSession(error)) {
          showStatus(statusRegionElement, `The change could not be cancelled: ${(error as Error).message}`);
        }
      }
    })();
  });
  const runningDetails: string[] = [];
  if (progress !== undefined) {
    if (progress.bytesMoved !== null && progress.bytesTotal !== null) {
      runningDetails.push(`${formatBytes(progress.bytesMoved)} of ${formatBytes(progress.bytesTotal)} moved`);
    }
    if (progress.estimatedSecondsLeft !== null)
      runningDetails.push(`about ${formatDuration(progress.estimatedSecondsLeft)} left`);
    if (progress.attempts > 1) runningDetails.push(`attempt ${progress.attempts}`);
    if (progress.lastError !== null) runningDetails.push(`last error: ${progress.lastError}`);
  }
  if (pending.waitingFor !== undefined) runningDetails.push(pending.waitingFor);
  return h(
    "section",
    { class: "card", "aria-labelledby": headingId },
    h("h2", { id: headingId }, `Change ${pending.id} in progress`),
    h("label", { for: progressId }, `${done} of ${total} operations done`),
    h("progress", { id: progressId, max: total, value: done }, `${done} of ${total}`),
    h(
      "ol",
      { class: "operations" },
      pending.completed.map((operation) =>
        h(
          "li",
          { class: "done" },
          h("strong", {}, "done "),
          describeOperation(operation),
          operation.completedAt === undefined ? null : ` at ${formatInstant(operation.completedAt)}`,
        ),
      ),
      pending.pending.map((operation, position) =>
        h(
          "li",
          { class: position === 0 ? "running" : "pending" },
          h("strong", {}, position === 0 ? "running " : "pending "),
          describeOperation(operation),
          position === 0 && runningDetails.length > 0 ? ` (${runningDetails.join(", ")})` : null,
        ),
      ),
    ),
    cancel,
    lastLine,
    history,
  );
}

/** The changes that ended, newest first, as the cluster keeps them (the last one and up to nine before it). */
function changeHistory(status: ClusterStatus): HTMLElement | null {
  const ended = status.lastChange === undefined ? [] : [status.lastChange, ...(status.earlierChanges ?? [])];
  if (ended.length === 0) return null;
  return table(
    "Recent changes",
    ["Change", "Outcome", "Started", "Ended", "Took"],
    ended.map((change) => {
      const tookMs = Date.parse(change.completedAt) - Date.parse(change.startedAt);
      return [
        String(change.id),
        h("span", { class: `badge status-${outcomeKind(change.status)}` }, change.status),
        h("time", { datetime: change.startedAt }, formatInstant(change.startedAt)),
        h("time", { datetime: change.completedAt }, formatInstant(change.completedAt)),
        Number.isFinite(tookMs) && tookMs >= 0 ? formatDuration(Math.round(tookMs / 1000)) : "—",
      ];
    }),
  );
}

/** The badge colour of a change's outcome. */
function outcomeKind(status: string): "healthy" | "unhealthy" | "creating" {
  if (status === "COMPLETED") return "healthy";
  return status === "FAILED" ? "unhealthy" : "creating";
}
