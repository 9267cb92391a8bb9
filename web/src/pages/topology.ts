import { type Cluster, type ClusterStatus, endedSession, type TopologyDocument } from "../api.js";
import { type Child, h, uniqueId } from "../dom.js";
import { refreshContent, repeatWhileShown } from "../ui.js";
import type { PageContext } from "./page.js";

/** How often the topology is asked for again while it is shown. */
const topologyPollMs = 2_000;

/** What the grid shows of one partition. */
interface PartitionSummary {
  partitionId: number;
  leader: number | null;
  replicas: number;
  unhealthyReplicas: number;
}

/** Summarizes each partition from the brokers' reports: its leader, how many replicas report it, how many are ill. */
export function summarizePartitions(topology: TopologyDocument): PartitionSummary[] {
  const ids = new Set<number>();
  for (let id = 1; id <= topology.partitionsCount; id += 1) ids.add(id);
  for (const broker of topology.brokers) for (const partition of broker.partitions) ids.add(partition.partitionId);
  return [...ids]
    .sort((left, right) => left - right)
    .map((partitionId) => {
      let leader: number | null = null;
      let replicas = 0;
      let unhealthyReplicas = 0;
      for (const broker of topology.brokers) {
        const replica = broker.partitions.find((partition) => partition.partitionId === partitionId);
        if (replica === undefined) continue;
        replicas += 1;
        if (replica.health !== "healthy") unhealthyReplicas += 1;
        if (replica.role === "leader") leader = broker.nodeId;
      }
      return { partitionId, leader, replicas, unhealthyReplicas };
    });
}

/** Election priorities by broker and partition, from the management API's configuration. */
function priorities(status: ClusterStatus | null): Map<string, number> {
  const byReplica = new Map<string, number>();
  for (const broker of status?.brokers ?? []) {
    for (const partition of broker.partitions) byReplica.set(`${broker.id}/${partition.id}`, partition.priority);
  }
  return byReplica;
}

function findings(topology: TopologyDocument, summaries: readonly PartitionSummary[]): HTMLElement {
  const problems: string[] = [];
  for (const summary of summaries) {
    if (summary.leader === null) problems.push(`Partition ${summary.partitionId} has no leader.`);
    const healthy = summary.replicas - summary.unhealthyReplicas;
    if (healthy < topology.replicationFactor) {
      problems.push(
        `Partition ${summary.partitionId} is under-replicated: ${healthy} healthy of ${topology.replicationFactor} replicas.`,
      );
    }
  }
  if (problems.length === 0) {
    return h("p", { class: "finding ok" }, "Every partition has a leader and all of its replicas.");
  }
  return h(
    "ul",
    { class: "finding problems", "aria-label": "Partitions needing attention" },
    problems.map((problem) => h("li", {}, problem)),
  );
}

function topologyGrid(topology: TopologyDocument, status: ClusterStatus | null): HTMLElement {
  const summaries = summarizePartitions(topology);
  const priority = priorities(status);
  const brokers = [...topology.brokers].sort((left, right) => left.nodeId - right.nodeId);
  const captionId = uniqueId("topology-caption");
  const cell = (nodeId: number, partitionId: number): Child => {
    const broker = brokers.find((candidate) => candidate.nodeId === nodeId);
    const replica = broker?.partitions.find((partition) => partition.partitionId === partitionId);
    if (replica === undefined) return h("td", { class: "replica none" }, h("span", { class: "muted" }, "—"));
    const replicaPriority = priority.get(`${nodeId}/${partitionId}`);
    return h(
      "td",
      { class: `replica role-${replica.role} health-${replica.health}` },
      h("strong", {}, replica.role),
      h("br", {}),
      replica.health,
      replicaPriority === undefined ? null : [h("br", {}), `priority ${replicaPriority}`],
    );
  };
  return h(
    "div",
    {},
    h(
      "p",
      { class: "muted" },
      `${topology.clusterSize} brokers, ${topology.partitionsCount} partitions, replication factor ${topology.replicationFactor}; gateway ${topology.gatewayVersion}.`,
    ),
    findings(topology, summaries),
    h(
      "div",
      { class: "table-scroll", role: "region", "aria-labelledby": captionId, tabindex: 0 },
      h(
        "table",
        { class: "topology" },
        h("caption", { id: captionId }, "Partitions by broker"),
        h(
          "thead",
          {},
          h(
            "tr",
            {},
            h("th", { scope: "col" }, "Partition"),
            h("th", { scope: "col" }, "Leader"),
            h("th", { scope: "col" }, "Replicas"),
            brokers.map((broker) => h("th", { scope: "col" }, `Broker ${broker.nodeId}`)),
          ),
        ),
        h(
          "tbody",
          {},
          summaries.map((summary) =>
            h(
              "tr",
              {},
              h("th", { scope: "row" }, String(summary.partitionId)),
              h(
                "td",
                {},
                summary.leader === null ? h("span", { class: "problem" }, "none") : `broker ${summary.leader}`,
              ),
              h("td", {}, `${summary.replicas} of ${topology.replicationFactor}`),
              brokers.map((broker) => cell(broker.nodeId, summary.partitionId)),
            ),
          ),
        ),
      ),
    ),
  );
}

/**
 * The live topology of a cluster: brokers × partitions from its gateway (`/v2/topology`), with each replica's role,
 * health and election priority (from the management API), updated every few seconds while it is shown.
 */
export function topologyPanel(context: PageContext, cluster: Cluster): HTMLElement {
  const headingId = uniqueId("topology-title");
  const problem = h("p", { class: "status error", role: "status" });
  const content = h("div", {}, h("p", {}, "Asking the gateway for the topology…"));
  const panel = h(
    "section",
    { "aria-labelledby": headingId },
    h("h2", { id: headingId }, "Topology"),
    problem,
    content,
  );
  repeatWhileShown(panel, topologyPollMs, async () => {
    try {
      const [topology, status] = await Promise.all([
        context.api.topology(cluster.links.gateway),
        // Priorities are a detail: the grid is shown without them when the management API does not answer.
        context.api.clusterStatus(cluster.links.management).catch(() => null),
      ]);
      problem.textContent = "";
      refreshContent(content, topologyGrid(topology, status), JSON.stringify([topology, status?.brokers]));
    } catch (error) {
      if (endedSession(error)) return;
      problem.textContent = `The topology could not be read: ${(error as Error).message}`;
    }
  });
  return panel;
}
