/**
 * Clusters created through the Administration API and run by the test platform's local provisioner: the request
 * every test of a provisioned cluster makes, and the wait until it is Healthy.
 */
import { clusterParameters, planTypes } from "../../src/platform/admin/clusters/parameters.js";
import { eventually } from "./cluster.js";
import type { TestPlatform } from "./platform.js";

/** Where a provisioned cluster answers, as its `links` say. */
export interface ProvisionedClusterLinks {
  gateway: string;
  management: string;
}

/**
 * Creates a cluster of the plan with `brokers` brokers (the first channel, its default generation, the first region)
 * with an Administration API token, and waits until it is Healthy; answers its id and links.
 */
export async function createHealthyCluster(
  platform: TestPlatform,
  adminToken: string,
  options: { name: string; brokers: number; timeoutMs: number },
): Promise<{ clusterId: string; links: ProvisionedClusterLinks }> {
  const parameters = clusterParameters();
  const channel = parameters.channels[0]!;
  const plan = planTypes.find((candidate) => candidate.shape.brokers === options.brokers);
  if (plan === undefined) throw new Error(`no plan has ${options.brokers} brokers`);
  const created = await fetch(`${platform.url}/admin/clusters`, {
    method: "POST",
    headers: { authorization: `Bearer ${adminToken}`, "content-type": "application/json" },
    body: JSON.stringify({
      name: options.name,
      planTypeId: plan.uuid,
      channelId: channel.uuid,
      generationId: channel.defaultGeneration.uuid,
      regionId: parameters.regions[0]!.uuid,
    }),
  });
  if (created.status !== 200) throw new Error(`creating cluster ${options.name} answered ${created.status}`);
  const { clusterId } = (await created.json()) as { clusterId: string };
  const links = await eventually(`cluster ${options.name} Healthy`, options.timeoutMs, async () => {
    const response = await fetch(`${platform.url}/admin/clusters/${clusterId}`, {
      headers: { authorization: `Bearer ${adminToken}` },
    });
    const cluster = (await response.json()) as { status: { ready: string }; links: ProvisionedClusterLinks };
    return cluster.status.ready === "Healthy" ? cluster.links : undefined;
  });
  return { clusterId, links };
}
